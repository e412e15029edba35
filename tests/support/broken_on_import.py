"""A driver module that fails as it is imported (not an ImportError), for the bad-input tests."""

raise RuntimeError("this driver's module fails as it loads (a test module that always raises)")
