"""A sync job's context variables across snapshots: a ContextVar global of the agent's
own module, two instance-level ContextVars (one with no default) on an object, one of
them also held by a dict (one variable, two holders), and a library's module-level
ContextVar (ctxlib.CURRENT_TENANT, on PYTHONPATH: saved by reference, read back by the
library's own function). Values are set before snapshot 1, one is changed between
snapshot 1 and 2, one is set again after snapshot 2; every read is printed."""

import contextvars
import decimal

import ctxlib

from snapstate import snapshot

REQUEST_ID = contextvars.ContextVar("request_id", default="none")


class Tracer:
    def __init__(self):
        self.span = contextvars.ContextVar("span")  # no default: unset raises LookupError
        self.depth = contextvars.ContextVar("depth", default=0)


def show(step, tracer, holders):
    print(
        step,
        REQUEST_ID.get(),
        tracer.span.get("<unset>"),
        tracer.depth.get(),
        holders["span"] is tracer.span,
        holders["span"].get("<unset>"),
        ctxlib.current_tenant(),
        ctxlib.Tracer.current.get(),
        decimal.Decimal(1) / 3,
        flush=True,
    )


def main():
    tracer = Tracer()
    holders = {"span": tracer.span}
    REQUEST_ID.set("req-42")
    tracer.span.set("span-A")
    tracer.depth.set(3)
    ctxlib.CURRENT_TENANT.set("acme")
    ctxlib.Tracer.current.set("trace-7")  # a library class's attribute
    decimal.getcontext().prec = 5  # decimal keeps its context variable in C
    show("before", tracer, holders)
    snapshot("values set")
    show("after-1", tracer, holders)
    tracer.span.set("span-B")
    snapshot("span changed")
    show("after-2", tracer, holders)
    tracer.depth.set(tracer.depth.get() + 1)
    show("incremented", tracer, holders)
    return f"{REQUEST_ID.get()}/{tracer.span.get()}/{tracer.depth.get()}/{ctxlib.current_tenant()}"
