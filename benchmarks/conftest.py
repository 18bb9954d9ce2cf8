# The --backend option comes from the w8a8 pytest plugin (conformance.pytest_plugin).
