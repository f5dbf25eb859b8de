# tests/deploy/: the local launcher (make run's no-GPU path), the Kubernetes manifests (schemas,
# knobs, probes against the code, TLS wiring), the container recipe (static lint) and the worker
# pod's entry point (deploy/node-ranks.sh with a stand-in rank).
SCRIPT_TESTS += tests/deploy/test_launch.sh tests/deploy/test_manifests.py tests/deploy/test_certs.py
SCRIPT_TESTS += tests/deploy/test_rank_nogpu.sh tests/deploy/test_dockerfile.py \
                tests/deploy/test_node_ranks.sh
# make gpu-elastic's driver (scripts/gpu_elastic.py) with a FAKE eep-rank and the real etcd + eepd.
SCRIPT_TESTS += tests/deploy/test_gpu_elastic_driver.sh
# make run's rank side (scripts/eep_run.py: status line, fault schedule, summary, timeline PNG;
# deploy/launch.sh's GPU path) with FAKE eep-ranks.
SCRIPT_TESTS += tests/deploy/test_run_driver.sh
# scripts/thread-dump.sh (where each thread of a stalled rank sits) on a live process.
SCRIPT_TESTS += tests/deploy/test_thread_dump.sh
# scripts/kernel-ab.sh (a kernel change against an older revision in one device call), FAKE bench.
SCRIPT_TESTS += tests/deploy/test_kernel_ab.sh
