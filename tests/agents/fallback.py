"""Values off the common pickling path: a super() object (cloudpickle refuses it, so
the dill fallback takes it) and closed file objects (restored closed)."""

from snapstate import snapshot


class Base:
    def greet(self, who):
        return f"hello {who} from {type(self).__name__}"


class Child(Base):
    def work(self, path):
        parent = super()  # a super object held across the snapshot
        with open(path, "w") as out:
            out.write("data")
        snapshot("holding-super-and-closed-file")
        print("closed file", out.closed, out.name == path, out.mode, flush=True)
        snapshot("again")
        return parent.greet("agent")


def main():
    import os
    import tempfile

    path = os.path.join(tempfile.gettempdir(), "snapstate-fallback-test.txt")
    print(Child().work(path), flush=True)
    return "ok"
