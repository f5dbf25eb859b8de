# tests/deploy/: the local launcher (make run's no-GPU path) and the Kubernetes manifests.
SCRIPT_TESTS += tests/deploy/test_launch.sh tests/deploy/test_manifests.py tests/deploy/test_certs.py
SCRIPT_TESTS += tests/deploy/test_rank_nogpu.sh
# make gpu-elastic's driver (scripts/gpu_elastic.py) with a FAKE eep-rank and the real etcd + eepd.
SCRIPT_TESTS += tests/deploy/test_gpu_elastic_driver.sh
