"""Holds an API key read from the environment (ACME_API_KEY) in a local and in a dict
across two snapshots, and prints a digest of the key it holds after each (never the key
itself: nothing the job prints should put it anywhere)."""

import hashlib
import os

from snapstate import snapshot


def digest(value):
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def main():
    key = os.environ["ACME_API_KEY"]
    config = {"api_key": key, "region": "eu-west"}
    print("before", digest(key), flush=True)
    snapshot("holding the key")
    print("after-1", digest(key), digest(config["api_key"]), key is config["api_key"], flush=True)
    snapshot("still holding it")
    print("after-2", digest(key), config["region"], flush=True)
    return digest(key)
