# tests/deploy/: the local launcher (make run's no-GPU path) and the Kubernetes manifests.
SCRIPT_TESTS += tests/deploy/test_launch.sh tests/deploy/test_manifests.py tests/deploy/test_certs.py
SCRIPT_TESTS += tests/deploy/test_rank_nogpu.sh
