"""A debugger for PYTHONBREAKPOINT in tests/test_debug.py: called with the frame to stop
in (`frame=`, as pdb's and ipdb's set_trace take it), it prints where it was called and
one of that frame's locals, and lets the run go on."""


def stop(frame=None):
    print("hook:", frame.f_code.co_name, frame.f_lineno, frame.f_locals["count"], flush=True)
