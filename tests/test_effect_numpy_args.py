"""An @effect's numpy array argument is digested (the ledger matches a re-executed call
by its arguments). The numpy adapter leaves an array owning its data to numpy's own
pickling (it returns NotImplemented); the digest used to index that result as a reduce
tuple and failed with TypeError ('NotImplementedType' object is not subscriptable)."""

from __future__ import annotations

import pytest

from snapstate.runtime._effect_args import args_digest

np = pytest.importorskip("numpy", reason="the integrations extra is not installed")


def test_array_owning_its_data_is_digested_by_value():
    a, same, other = np.arange(6), np.arange(6), np.arange(1, 7)
    digest = args_digest("agent.send", (a,), {"n": 1})
    assert digest == args_digest("agent.send", (same,), {"n": 1})
    assert digest != args_digest("agent.send", (other,), {"n": 1})


def test_view_and_subclass_arguments_are_digested():
    base = np.arange(12)
    view = base[::3]
    assert args_digest("f", (view,), {}) == args_digest("f", (np.arange(12)[::3],), {})
    assert args_digest("f", (view,), {}) != args_digest("f", (base[1::3],), {})

    class Tagged(np.ndarray):
        pass

    t = np.arange(4).view(Tagged).copy()  # owns its data, no attributes: numpy pickles it
    assert args_digest("f", (t,), {}) == args_digest("f", (t.copy(),), {})
