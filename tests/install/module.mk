# tests/install/: make install into a temp prefix, a program built against it with pkg-config,
# make uninstall (test_install.sh; deploy/install.mk has unit-tests build the agent's .so first).
SCRIPT_TESTS += tests/install/test_install.sh
