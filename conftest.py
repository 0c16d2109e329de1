"""Root conftest: pytest's own ``pytester`` for the plugin tests."""

pytest_plugins = ["pytester"]
