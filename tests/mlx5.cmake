# Tests of the mlx5 (ibverbs) plugin, included by tests/CMakeLists.txt.
#
# test_mlx5_handshake (tests/unit/test_mlx5_handshake.c) is registered by
# the unit-test glob: the handshake state machine and wire formats, no NIC.
#
# mlx5_rxe_conformance boots a QEMU guest (TCG) with two soft-RoCE devices
# and runs the conformance suite against the plugin inside it, then the
# cross-device pair tests with lost and duplicated handshake datagrams, and
# with a job secret (engine.auth_key): the suite, the pair, and refusals of
# another key and of none (tests/vm/mlx5-conformance.sh,
# tests/vm/guest-mlx5.sh). It checks its prerequisites when it runs
# (qemu, linux-image-amd64 with rdma_rxe, busybox-static, the plugin) and
# reports Skipped with a loud message when they are missing, so installing
# them later needs no reconfigure. About 2-3 minutes on 2 busy cores; the
# guest takes both emulated CPUs, hence PROCESSORS 2.
add_test(NAME mlx5_rxe_conformance
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/vm/mlx5-conformance.sh ${CMAKE_BINARY_DIR})
set_tests_properties(mlx5_rxe_conformance PROPERTIES
  TIMEOUT 600 SKIP_RETURN_CODE 77 PROCESSORS 2 LABELS "mlx5;vm;conformance"
  RESOURCE_LOCK te_vm_guest)

# vm_run_share (tests/vm/share-test.sh): run.sh --share, which the test
# above needs for a build directory under /tmp outside the source tree
# (a user's `cmake -B /tmp/build`): two short boots (about 10 s each).
add_test(NAME vm_run_share
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/vm/share-test.sh ${CMAKE_BINARY_DIR})
set_tests_properties(vm_run_share PROPERTIES
  TIMEOUT 600 SKIP_RETURN_CODE 77 PROCESSORS 2 LABELS "vm"
  RESOURCE_LOCK te_vm_guest)

# The plugin loads in te-info like any other (no device needed for that).
if(TARGET te-plugin-mlx5)
  add_test(NAME mlx5_plugin_loads
    COMMAND te-info --plugins)
  set_tests_properties(mlx5_plugin_loads PROPERTIES
    ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}" TIMEOUT 60
    PASS_REGULAR_EXPRESSION "mlx5 +0\\.1\\.0 +ABI 1\\.4" LABELS mlx5)
endif()

# te-mlx5-pair (tests/vm/mlx5_pair.c): two processes on two different verbs
# devices, so traffic crosses the guest's veth as RoCEv2 packets; run by the
# guest script with and without lost/duplicated handshake datagrams.
add_executable(te-mlx5-pair ${CMAKE_CURRENT_SOURCE_DIR}/vm/mlx5_pair.c)
target_link_libraries(te-mlx5-pair PRIVATE transferengine)
