"""An exception kept in a variable and one re-raised from an except body after a
restore print the same tracebacks (file, line, carets) as in an uninterrupted run."""

from snapstate import snapshot


def fail(x):
    return {"k": 1}[x] + 1


def handler():
    try:
        fail("missing")
    except KeyError:
        snapshot("in-except")
        raise


def main():
    saved = None
    try:
        fail("other")
    except KeyError as e:
        saved = e
    snapshot("holding")
    import traceback

    print("".join(traceback.format_exception(saved)))
    handler()
