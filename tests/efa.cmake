# Tests of the efa plugin (docs/efa.md) over libfabric's own providers:
# the whole conformance suite with shm and tcp;ofi_rxm (1 and 2 NICs, two
# processes), a two-host run across network namespaces, the quirk probe,
# the refusal of emulated RMA, and the raw libfabric reference benchmark.
# Included by tests/CMakeLists.txt; everything is skipped when the plugin
# is not built (no libfabric).

# The probe's unit test exists in every build; it tests something only
# where libfabric is.
if(TARGET test_efa_probe AND TARGET te-plugin-efa)
  pkg_check_modules(TE_EFA_TEST_LIBFABRIC IMPORTED_TARGET libfabric)
  target_sources(test_efa_probe PRIVATE ${TE_EFA_PROBE_SOURCE})
  target_include_directories(test_efa_probe PRIVATE
    ${PROJECT_SOURCE_DIR}/plugins/efa)
  target_link_libraries(test_efa_probe PRIVATE PkgConfig::TE_EFA_TEST_LIBFABRIC)
  target_compile_definitions(test_efa_probe PRIVATE TE_EFA_TEST_HAVE_LIBFABRIC)
  set_tests_properties(test_efa_probe PROPERTIES TIMEOUT 120 LABELS efa)
endif()

# A unit test of the efa plugin that exits 77 where the plugin or its
# provider is absent: label efa, built after the plugin, timeout in s.
function(te_efa_unit_test name timeout)
  if(TARGET ${name})
    set_tests_properties(${name} PROPERTIES LABELS efa
      SKIP_RETURN_CODE 77 TIMEOUT ${timeout})
    if(TARGET te-plugin-efa)
      add_dependencies(${name} te-plugin-efa)
    endif()
  endif()
endfunction()

# Engines of one process over shm, one destroyed while the other has it
# as a peer (plugins/efa/efa_local.h).
te_efa_unit_test(test_efa_inprocess 300)

# Job authentication (plugins/efa/efa_auth.h): the handshake's messages,
# and engines of this process over shm with the same, another or no secret.
te_efa_unit_test(test_efa_auth 120)

# Orderly close (plugins/efa/efa_bye.h): the goodbye message, and engines
# of this process over shm reporting a destroyed one closed in order.
te_efa_unit_test(test_efa_bye 120)
# A writer learns that its target (a forked process, which never added the
# writer) closed its engine: the goodbye with a secret, the shm region's
# absence at its heartbeat without one. tsan-twoproc pass.
te_efa_unit_test(test_efa_bye_twoproc 120)

# Writes without an immediate to a sleepy target over tcp;ofi_rxm (manual
# progress: plugins/efa/efa_cq.c inbound_pending). Two processes (the
# target is forked): "twoproc" in the name puts it in the tsan-twoproc
# pass (docs/reliability.md).
te_efa_unit_test(test_efa_tcp_progress_twoproc 120)

# A receiver that never writes to its sender (a forked process, then
# killed) finds it down by a keyless heartbeat, over shm and tcp;ofi_rxm.
te_efa_unit_test(test_efa_heartbeat_receiver_twoproc 120)

# The shm doorbell across processes (plugins/efa/efa_shm_bell.h): a
# receiver blocked with every timed wake-up off is woken by each of a
# forked sender's writes and by its death. tsan-twoproc pass.
te_efa_unit_test(test_efa_shm_bell_twoproc 120)

# A same-host shm peer dies holding its region's spin lock (or ours) while
# a write or our progress spins on it inside libfabric: the guard releases
# the lock (plugins/efa/efa_shm_guard.h). Forked peer: tsan-twoproc pass.
te_efa_unit_test(test_efa_shm_dead_lock_twoproc 120)

# A same-host initiator that authenticated, wrote and exited leaves no
# authentication record behind (plugins/efa/efa_auth.c forget_exited).
# Forked initiators: tsan-twoproc pass.
te_efa_unit_test(test_efa_auth_forget_twoproc 120)

# Idle workers blocking on the CQ wait fd over tcp;ofi_rxm, every timed
# wake-up off (plugin ABI 1.3; plugins/efa/efa_cq.c efa_wait_arm).
te_efa_unit_test(test_idle_wait_efa 180)
# Its shm-bell case again with libfabric's shm told not to use CMA: large
# writes then move in segments, each needing the target's progress, so a
# writer keeps ringing a target that went to sleep meanwhile
# (plugins/efa/efa_shm_bell.h).
if(TARGET test_idle_wait_efa)
  add_test(NAME test_idle_wait_efa_nocma COMMAND test_idle_wait_efa)
  set_tests_properties(test_idle_wait_efa_nocma PROPERTIES LABELS efa
    SKIP_RETURN_CODE 77 TIMEOUT 180
    ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR};CK_DEFAULT_TIMEOUT=120;FI_SHM_DISABLE_CMA=1;CK_RUN_CASE=shm-bell")
endif()

# A raw libfabric shm endpoint that never authenticated writes WriteImms
# to a keyed engine: the immediates are dropped (plugins/efa/efa_auth.c),
# a member's get through. Needs libfabric's headers: skips (77) without.
if(TARGET test_efa_stranger AND TARGET te-plugin-efa)
  pkg_check_modules(TE_EFA_TEST_LIBFABRIC IMPORTED_TARGET libfabric)
  target_include_directories(test_efa_stranger PRIVATE
    ${PROJECT_SOURCE_DIR}/plugins/efa ${PROJECT_SOURCE_DIR}/plugins/common)
  target_link_libraries(test_efa_stranger PRIVATE
    PkgConfig::TE_EFA_TEST_LIBFABRIC)
  target_compile_definitions(test_efa_stranger PRIVATE
    TE_EFA_TEST_HAVE_LIBFABRIC)
endif()
te_efa_unit_test(test_efa_stranger 120)

if(NOT TARGET te-plugin-efa)
  return()
endif()

set(TE_EFA_ENV "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}")
# tcp;ofi_rxm picks eth0 unless pinned; tests only ever use 127.0.0.1.
set(TE_EFA_TCP --set "efa.provider=tcp$<SEMICOLON>ofi_rxm" --set efa.node=127.0.0.1)
set(TE_EFA_SHM --set efa.provider=shm)
set(TE_EFA_2NIC --set engine.nics_per_group=2 --set efa.devices=2)

# Each run includes peer_closed, and the two-process runs peer_killed (a
# remote SIGKILLed with the engine's timers off: efa itself must report it,
# through the pidfd, provider errors or the stall rule). --strict: efa has
# every optional behaviour too, the orderly close (-ESHUTDOWN, noticed
# without traffic) since its goodbyes (plugins/efa/efa_bye.h).
function(te_efa_conformance name)
  add_test(NAME efa_conformance_${name}
           COMMAND te-conformance --plugin efa --strict ${ARGN})
  set_tests_properties(efa_conformance_${name} PROPERTIES
    ENVIRONMENT "${TE_EFA_ENV}" TIMEOUT 180 LABELS "efa;conformance"
    PASS_REGULAR_EXPRESSION " 0 failed"
    FAIL_REGULAR_EXPRESSION "FAIL ")
endfunction()

# The suite in every mode the issue asks for: two processes, 1 and 2 NICs.
te_efa_conformance(shm_1nic_twoproc --two-process ${TE_EFA_SHM})
te_efa_conformance(shm_2nic_twoproc --two-process ${TE_EFA_SHM} ${TE_EFA_2NIC})
te_efa_conformance(tcp_1nic_twoproc --two-process ${TE_EFA_TCP})
te_efa_conformance(tcp_2nic_twoproc --two-process ${TE_EFA_TCP} ${TE_EFA_2NIC})
# Heartbeats every 20 ms between and during cases (zero-length writes).
te_efa_conformance(shm_1nic_twoproc_heartbeat --two-process ${TE_EFA_SHM}
  --set engine.heartbeat_ms=20)
te_efa_conformance(tcp_1nic_twoproc_heartbeat --two-process ${TE_EFA_TCP}
  --set engine.heartbeat_ms=20)
# Remotes in this process (self-connections, in-process shm).
te_efa_conformance(shm_2nic_inproc ${TE_EFA_SHM} ${TE_EFA_2NIC})
# The other paths: no inject, peers inserted inside peer_add, and a killed
# peer noticed through the provider (tcp: ECANCELED/ENOTCONN, then a stall
# of -FI_EAGAIN) instead of the same-host pidfd.
te_efa_conformance(shm_1nic_twoproc_noinject_atadd --two-process ${TE_EFA_SHM}
  --set efa.inject=off --set efa.av_insert=at_add)
te_efa_conformance(tcp_1nic_twoproc_nowatch --two-process ${TE_EFA_TCP}
  --set efa.watch_peers=false --set efa.stall_timeout_ms=1000
  --set efa.av_insert=at_add)

# Caller-driven progress (docs/progress.md): over shm (no wait object: the
# progress thread naps) and over tcp (the CQ wait fd).
te_efa_conformance(shm_1nic_twoproc_caller --two-process ${TE_EFA_SHM}
  --set engine.progress=caller)
te_efa_conformance(tcp_1nic_twoproc_caller --two-process ${TE_EFA_TCP}
  --set engine.progress=caller)

# Every peer authenticated with the job secret (docs/security.md): the
# whole suite across two processes, over shm and tcp, 1 and 2 NICs.
set(TE_EFA_AUTH --set engine.auth_key=conformance-job-secret-0123)
te_efa_conformance(shm_1nic_twoproc_auth --two-process ${TE_EFA_SHM} ${TE_EFA_AUTH})
te_efa_conformance(shm_2nic_twoproc_auth --two-process ${TE_EFA_SHM} ${TE_EFA_2NIC} ${TE_EFA_AUTH})
te_efa_conformance(tcp_1nic_twoproc_auth --two-process ${TE_EFA_TCP} ${TE_EFA_AUTH})
te_efa_conformance(tcp_2nic_twoproc_auth --two-process ${TE_EFA_TCP} ${TE_EFA_2NIC} ${TE_EFA_AUTH})
# Refusals, named: a remote with another secret (refused on both sides, the
# write fails with the reason), a keyed remote refusing this keyless engine,
# and this keyed engine refusing a keyless remote.
function(te_efa_refusal name regex)
  add_test(NAME efa_auth_refused_${name}
           COMMAND te-conformance --plugin efa --two-process --remotes 1
                   --case write_sizes ${ARGN})
  set_tests_properties(efa_auth_refused_${name} PROPERTIES
    ENVIRONMENT "${TE_EFA_ENV}" TIMEOUT 60 LABELS "efa;conformance"
    PASS_REGULAR_EXPRESSION "${regex}")
endfunction()
# Either side may verify first (both add each other), and the other's line
# ("it refused our proof") can be lost when the suite closes the remote
# before its worker read the REFUSE (a CI rehearsal had only one side's
# lines): a refusal naming the cause, then the failed write, is required.
te_efa_refusal(other_key_tcp
  "failed authentication: (its proof does not verify under our key|it refused our proof) \\(a different engine.auth_key\\).*FAIL write_sizes"
  ${TE_EFA_TCP} ${TE_EFA_AUTH} --remote-set engine.auth_key=another-job-secret-456789)
te_efa_refusal(remote_keyed_shm
  "the remote refused this engine as a peer: .*peer of pid [0-9]+ failed authentication: it has no key"
  ${TE_EFA_SHM} --remote-set engine.auth_key=conformance-job-secret-0123)

# Two hosts: network namespaces joined by a veth pair (root needed; the
# script exits 77 = skipped, with the reason, where they cannot be made).
add_test(NAME efa_netns_tcp
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/efa/netns.sh ${CMAKE_BINARY_DIR})
add_test(NAME efa_netns_tcp_2nic
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/efa/netns.sh ${CMAKE_BINARY_DIR}
                 --set engine.nics_per_group=2 --set efa.devices=2)
set_tests_properties(efa_netns_tcp efa_netns_tcp_2nic PROPERTIES
  TIMEOUT 240 LABELS "efa;netns" SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
  PASS_REGULAR_EXPRESSION " 0 failed"
  FAIL_REGULAR_EXPRESSION "FAIL ")

# No silent degradation: te-info names the provider and every path, and a
# provider that emulates RMA is refused when asked (and warned about when
# not). udp;ofi_rxd is such a provider in Debian's libfabric.
add_test(NAME efa_info_paths COMMAND te-info --plugin efa --groups)
set_tests_properties(efa_info_paths PROPERTIES TIMEOUT 60 LABELS efa
  ENVIRONMENT "${TE_EFA_ENV};TE_EFA_PROVIDER=shm;TE_ENGINE_LOG_LEVEL=2"
  PASS_REGULAR_EXPRESSION "paths: provider=shm .*rma=native.*completion=transmit.*nic 0: shm:shm")
add_test(NAME efa_require_native_rma_refuses COMMAND te-info --plugin efa --groups)
set_tests_properties(efa_require_native_rma_refuses PROPERTIES TIMEOUT 60
  LABELS efa
  ENVIRONMENT "${TE_EFA_ENV};TE_EFA_PROVIDER=udp\;ofi_rxd;TE_EFA_NODE=127.0.0.1;TE_EFA_REQUIRE_NATIVE_RMA=true"
  PASS_REGULAR_EXPRESSION "emulates RMA by messages .*refused because efa.require_native_rma = true")
add_test(NAME efa_emulated_rma_warns COMMAND te-info --plugin efa --groups)
set_tests_properties(efa_emulated_rma_warns PROPERTIES TIMEOUT 60 LABELS efa
  ENVIRONMENT "${TE_EFA_ENV};TE_EFA_PROVIDER=udp\;ofi_rxd;TE_EFA_NODE=127.0.0.1"
  PASS_REGULAR_EXPRESSION "warning: efa: provider udp;ofi_rxd: RMA is EMULATED")
# Paths (docs/paths.md): every degraded path is reported by te-info --paths
# and refused under engine.require, naming the capability.
function(te_efa_paths name regex)
  add_test(NAME efa_paths_${name} COMMAND te-info --paths --plugin efa ${ARGN})
  set_tests_properties(efa_paths_${name} PROPERTIES TIMEOUT 60 LABELS efa
    ENVIRONMENT "${TE_EFA_ENV}" PASS_REGULAR_EXPRESSION "${regex}")
endfunction()
te_efa_paths(shm_reported "write +DEGRADED has \\[zero_copy,native_rma\\] lacks \\[hardware,auto_progress\\]" ${TE_EFA_SHM})
te_efa_paths(shm_hardware_refused "engine.require: write on NIC shm:shm lacks hardware" ${TE_EFA_SHM} --set engine.require=hardware)
te_efa_paths(shm_auto_progress_refused "engine.require: write on NIC shm:shm lacks auto_progress" ${TE_EFA_SHM} --set engine.require=auto_progress)
te_efa_paths(shm_fast_accepted "Paths \\(transport efa, engine.require = fast\\)" ${TE_EFA_SHM} --set engine.require=fast)
te_efa_paths(tcp_hardware_refused "engine.require: write on NIC tcp.ofi_rxm:[^ ]* lacks hardware" ${TE_EFA_TCP} --set engine.require=hardware)
te_efa_paths(udp_native_rma_refused "engine.require: write on NIC udp.ofi_rxd:[^ ]* lacks native_rma" --set "efa.provider=udp$<SEMICOLON>ofi_rxd" --set efa.node=127.0.0.1 --set engine.require=native_rma)
te_efa_paths(udp_reported "write +DEGRADED .*lacks \\[native_rma" --set "efa.provider=udp$<SEMICOLON>ofi_rxd" --set efa.node=127.0.0.1)

# A forced completion level is measured too: delivery completion never
# completes an imm-only write on shm 1.17, so the plugin refuses it.
add_test(NAME efa_forced_delivery_refused COMMAND te-info --plugin efa --groups)
set_tests_properties(efa_forced_delivery_refused PROPERTIES TIMEOUT 60
  LABELS efa
  ENVIRONMENT "${TE_EFA_ENV};TE_EFA_PROVIDER=shm;TE_EFA_COMPLETION=delivery"
  PASS_REGULAR_EXPRESSION "zero-length write with remote CQ data is not delivered and completed with delivery completion")

# The raw libfabric reference (tools/fi-raw-bench) runs and says so in JSON.
if(TARGET fi-raw-bench)
  add_test(NAME efa_fi_raw_bench_smoke
           COMMAND fi-raw-bench --provider shm --mode pingpong,stream
                   --sizes 8,65536 --iters 200 --warmup 20 --ms 20 --json)
  set_tests_properties(efa_fi_raw_bench_smoke PROPERTIES TIMEOUT 60
    LABELS efa PASS_REGULAR_EXPRESSION "\"mode\": \"stream\".*\"gbps\"")
  # Its immlat loop (te-bench's, against raw libfabric): B's stamps come
  # back and give a latency above zero.
  add_test(NAME efa_fi_raw_bench_immlat
           COMMAND fi-raw-bench --provider shm --mode immlat --sizes 0,8
                   --iters 200 --warmup 20 --gap-us 5 --idle-sleep-us 0 --json)
  set_tests_properties(efa_fi_raw_bench_immlat PROPERTIES TIMEOUT 60
    LABELS efa PASS_REGULAR_EXPRESSION
    "\"mode\": \"immlat\", \"size\": 8, \"iters\": 200, \"gap_us\": 5, \"lat_us_p50\": ([1-9][0-9]*\\.[0-9]+|0\\.[0-9]*[1-9])")
endif()

# The shm guard's count of watched deaths (what a post to a guarded peer
# looks at instead of reading its pidfd: plugins/efa/efa_post.c), with the
# guard compiled in and a hand-made region: libfabric is not needed, so it
# runs in every build. Forked child: tsan-twoproc pass.
if(TARGET test_efa_shm_guard_deaths_twoproc)
  target_sources(test_efa_shm_guard_deaths_twoproc PRIVATE
    ${PROJECT_SOURCE_DIR}/plugins/efa/efa_shm_guard.c)
  target_include_directories(test_efa_shm_guard_deaths_twoproc PRIVATE
    ${PROJECT_SOURCE_DIR}/plugins/efa)
  target_link_libraries(test_efa_shm_guard_deaths_twoproc PRIVATE
    te-plugin-common)
  set_tests_properties(test_efa_shm_guard_deaths_twoproc PROPERTIES
    LABELS efa TIMEOUT 60)
endif()
