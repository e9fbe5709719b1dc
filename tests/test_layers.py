"""The layers at run time: the serializers import nothing of the runtime or the
resources (import-linter checks that statically, scripts/checks layers), so the
pickler learns their reducers from its registration table (serializers/_dispatch.py).
Every entry point must find it filled, even one that imports only the pickler."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def test_importing_only_the_pickler_registers_the_runtime_and_the_resources():
    """A fresh interpreter that imports serializers._pickler alone (as a tool or a test
    may) still saves generators through the runtime, files through the resource
    adapters, refuses live handles in every fallback, and knows the restore stubs."""
    script = textwrap.dedent(
        """
        import socket, sys, types
        from snapstate.serializers import _dispatch, _pickler

        assert "snapstate.runtime._reducers" in sys.modules
        assert {types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType} <= set(
            _dispatch.REDUCERS
        )
        assert socket.socket in _dispatch.HANDLE_TYPES

        def gen():
            yield 1
            yield 2

        g = gen()
        next(g)
        assert next(_pickler.loads(_pickler.dumps(g))) == 2

        with open(sys.executable, "rb") as f:
            assert _dispatch.adapter_for(type(f)) is not None
            f.seek(3)
            assert _pickler.loads(_pickler.dumps(f)).tell() == 3

        from snapstate.runtime import _morph
        assert _dispatch.is_stub.__module__ == "snapstate.serializers._dispatch"
        assert _dispatch._is_stub is _morph.is_morph
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_the_errors_module_needs_nothing_of_snapstate():
    """snapstate/_errors.py, below every layer, imports no other module."""
    import snapstate._errors as errors

    source = Path(errors.__file__).read_text(encoding="utf-8")
    imports = [
        line
        for line in source.splitlines()
        if line.startswith(("import ", "from ")) and line != "from __future__ import annotations"
    ]
    assert imports == []
