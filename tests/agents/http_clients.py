"""HTTP clients held across snapshots keep their whole configuration: an httpx.Client
with BasicAuth, a counting event hook, transport retries and limits, default params and
headers, and a cookie the server set for one path; a subclass of httpx.Client that adds
attributes; one that overrides __init__ with its own parameters; an httpx2.Client with a
bearer token and four timeouts; a requests.Session with a mounted HTTPAdapter whose
Retry answers the server's first 503, a response hook and basic auth. Each step sends
requests, prints what the clients hold, then snapshots. SERVER_URL from the environment;
HTTP_PASSWORD, HTTP_TOKEN and HTTP_KEY are the credentials (never in a snapshot)."""

import os

import httpx
import httpx2
import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from snapstate import snapshot

SEEN = {"requests": 0}
HOOKED: list = []


def count(request):
    SEEN["requests"] += 1


def on_response(response, *args, **kwargs):
    HOOKED.append(response.status_code)


class TenantClient(httpx.Client):
    """Adds attributes; its __init__ takes the base parameters plus its own."""

    def __init__(self, tenant, **kwargs):
        super().__init__(**kwargs)
        self.tenant, self.calls = tenant, 0

    def fetch(self, path):
        self.calls += 1
        return self.get(path, headers={"X-Tenant": self.tenant})


class SignedClient(httpx.Client):
    """Overrides __init__ with parameters of its own (not the base signature)."""

    def __init__(self, url, key, region):
        super().__init__(base_url=f"{url}/{region}", headers={"X-Api-Key": key})
        self.region = region


def settings(basic, bearer, session):
    """The transport and adapter settings as rebuilt (printed after each restore)."""
    pool = basic._transport._pool
    adapter = session.adapters["http://"]
    return (
        pool._retries,
        pool._max_connections,
        pool._max_keepalive_connections,
        pool._keepalive_expiry,
        bearer.timeout,
        adapter.max_retries.total,
        adapter._pool_maxsize,
    )


def main():
    url = os.environ["SERVER_URL"]
    basic = httpx.Client(
        base_url=url,
        auth=("alice", os.environ["HTTP_PASSWORD"]),
        event_hooks={"request": [count]},
        params={"v": "2"},
        headers={"X-Agent": "http"},
        transport=httpx.HTTPTransport(
            retries=3,
            limits=httpx.Limits(
                max_connections=7, max_keepalive_connections=3, keepalive_expiry=9.0
            ),
        ),
    )
    tenant = TenantClient("acme", base_url=url)
    signed = SignedClient(url, os.environ["HTTP_KEY"], "eu")
    bearer = httpx2.Client(
        base_url=url,
        headers={"Authorization": "Bearer " + os.environ["HTTP_TOKEN"]},
        timeout=httpx2.Timeout(5.0, connect=2.0, pool=3.0),
    )
    session = requests.Session()
    session.mount(
        "http://",
        HTTPAdapter(
            max_retries=Retry(
                total=4, backoff_factor=0, status_forcelist=[503], allowed_methods=["GET"]
            ),
            pool_maxsize=5,
        ),
    )
    session.hooks["response"].append(on_response)
    session.auth = ("bob", os.environ["HTTP_PASSWORD"])
    for step in range(3):
        basic.get(f"/basic/{step}")
        basic.get(f"/other/{step}")  # the cookie is for /basic only
        tenant.fetch(f"/tenant/{step}")
        signed.get(f"/signed/{step}")
        bearer.get(f"/bearer/{step}")
        flaky = session.get(f"{url}/flaky/{step}")  # 503 first: the Retry answers it
        print(
            step,
            SEEN["requests"],
            dict(basic.cookies),
            tenant.calls,
            tenant.tenant,
            type(tenant).__name__,
            type(signed).__name__,
            signed.region,
            flaky.status_code,
            HOOKED,
            *settings(basic, bearer, session),
            flush=True,
        )
        snapshot(f"step-{step}")
    for client in (basic, tenant, signed, bearer, session):
        client.close()
    return SEEN["requests"]
