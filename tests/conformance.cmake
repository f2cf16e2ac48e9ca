# The conformance suite (tools/te-conformance) against the loopback plugin in
# every mode the core must support: 1, 2 and 4 NICs; remotes in this process
# and in child processes; with reordering and delay injected.
set(TE_CONF_ENV "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}")

# A cross build runs its tests under an emulator (cmake/toolchain-aarch64.cmake:
# qemu-aarch64): the remote children are started through it too, since the
# host cannot exec the target's binary by itself (docs/arm64.md).
set(TE_CONF_REMOTE_WRAPPER)
if(CMAKE_CROSSCOMPILING AND CMAKE_CROSSCOMPILING_EMULATOR)
  list(JOIN CMAKE_CROSSCOMPILING_EMULATOR " " TE_CONF_EMULATOR_WORDS)
  set(TE_CONF_REMOTE_WRAPPER --remote-wrapper "${TE_CONF_EMULATOR_WORDS}")
endif()

function(te_conformance name)
  set(wrap)
  if("--two-process" IN_LIST ARGN)
    set(wrap ${TE_CONF_REMOTE_WRAPPER})
  endif()
  # --strict: loopback also has every optional behaviour (an orderly close
  # reported as -ESHUTDOWN, noticed without traffic): a NOTE fails here.
  add_test(NAME conformance_${name}
           COMMAND te-conformance --plugin loopback --strict ${ARGN} ${wrap})
  set_tests_properties(conformance_${name} PROPERTIES
    ENVIRONMENT "${TE_CONF_ENV}" TIMEOUT 300 LABELS conformance)
endfunction()

foreach(n 1 2 4)
  te_conformance(loopback_${n}nic_inproc --set engine.nics_per_group=${n})
  te_conformance(loopback_${n}nic_twoproc --two-process
                 --set engine.nics_per_group=${n})
endforeach()
te_conformance(loopback_4nic_inproc_reorder_delay
  --set engine.nics_per_group=4 --set loopback.fault_reorder=true
  --set loopback.fault_delay_us=30 --set loopback.fault_seed=7)
te_conformance(loopback_2nic_twoproc_reorder --two-process
  --set engine.nics_per_group=2 --set loopback.fault_reorder=true
  --set loopback.fault_seed=11)

# A case that cannot run says why, and the summary names it: in this
# process nothing can be SIGKILLed (peer_killed, remote_killed), while the
# orderly close (peer_closed) still runs.
te_conformance(loopback_skip_reasons --case remote_killed --case peer_killed
               --case peer_closed)
set_tests_properties(conformance_loopback_skip_reasons PROPERTIES
  PASS_REGULAR_EXPRESSION
  "SKIP remote_killed: needs --two-process.*SKIP peer_killed: needs --two-process.*PASS peer_closed.*1 passed, 0 failed, 2 skipped\nskipped [^\n]*\n  remote_killed: [^\n]+\n  peer_killed: ")

# A remote that refuses this engine as a peer: the message names the side
# that refused and carries its words, also from a child process (here the
# remote runs efa, so the loopback address is refused).
if(TARGET te-plugin-efa)
  add_test(NAME conformance_refusal_text
           COMMAND te-conformance --plugin loopback --two-process --remotes 1
                   --remote-set engine.plugin=efa --remote-set efa.provider=shm
                   --case write_sizes)
  set_tests_properties(conformance_refusal_text PROPERTIES
    ENVIRONMENT "${TE_CONF_ENV}" TIMEOUT 60 LABELS conformance
    PASS_REGULAR_EXPRESSION "remote 0: [^\n]*: the remote refused this engine as a peer: te_peer_add: address is for transport \"loopback\"")
endif()

# Routing policies (docs/sharding.md): NICs of different speeds (weighted
# shards) and small requests kept whole, with reordering; in this process
# and across processes.
te_conformance(loopback_4nic_inproc_weighted_whole
  --set engine.nics_per_group=4 --set engine.shard_min_bytes=128K
  --set loopback.link_gbps=100,25,50,25 --set loopback.fault_reorder=true)
te_conformance(loopback_4nic_twoproc_weighted_whole --two-process
  --set engine.nics_per_group=4 --set engine.shard_min_bytes=128K
  --set loopback.link_gbps=100,25,50,25)

# Heartbeats every 20 ms (engine.heartbeat_ms): every idle moment of the
# suite probes peers with zero-length writes; nothing may change.
te_conformance(loopback_2nic_twoproc_heartbeat --two-process
  --set engine.nics_per_group=2 --set engine.heartbeat_ms=20)

# Caller-driven progress (engine.progress = caller, docs/progress.md): no
# engine threads; the suite gives each engine an application thread that
# calls te_progress_wait (tools/te-conformance/pump.c). Also with blocking
# idle workers switched off the other way (idle_wait = sleep).
te_conformance(loopback_1nic_inproc_caller --set engine.progress=caller)
te_conformance(loopback_4nic_twoproc_caller --two-process
  --set engine.nics_per_group=4 --set engine.progress=caller)
te_conformance(loopback_2nic_inproc_caller_reorder_delay
  --set engine.nics_per_group=2 --set engine.progress=caller
  --set loopback.fault_reorder=true --set loopback.fault_delay_us=30)
te_conformance(loopback_2nic_twoproc_sleep --two-process
  --set engine.nics_per_group=2 --set engine.idle_wait=sleep)
# Every channel set up with the job secret's challenge-response
# (docs/security.md): none of the suite's connections may be refused.
te_conformance(loopback_2nic_inproc_auth --set engine.nics_per_group=2
  --set engine.auth_key=conformance-job-secret-0123)
te_conformance(loopback_2nic_twoproc_auth --two-process
  --set engine.nics_per_group=2 --set engine.auth_key=conformance-job-secret-0123)

# The main job and the tools run and say what they should.
add_test(NAME demo_inproc COMMAND te-demo --layers 4 --pages 64 --page-kib 16)
add_test(NAME demo_twoproc COMMAND te-demo --two-process --layers 4 --pages 64
         --page-kib 16)
add_test(NAME te_info_runs COMMAND te-info)
set_tests_properties(demo_inproc demo_twoproc PROPERTIES
  ENVIRONMENT "${TE_CONF_ENV}" TIMEOUT 120 PASS_REGULAR_EXPRESSION "te-demo: OK")
set_tests_properties(te_info_runs PROPERTIES ENVIRONMENT "${TE_CONF_ENV}"
  TIMEOUT 60 PASS_REGULAR_EXPRESSION "loopback .*ABI 1\\.4.*group 0: 1 NIC")
# te-info says how requests are split: NICs of 8 and 2 Gbit/s, small
# requests whole (docs/sharding.md).
add_test(NAME te_info_routing COMMAND te-info --groups)
set_tests_properties(te_info_routing PROPERTIES TIMEOUT 60
  ENVIRONMENT "${TE_CONF_ENV};TE_LOOPBACK_LINK_GBPS=8,2;TE_ENGINE_NICS_PER_GROUP=2;TE_ENGINE_SHARD_MIN_BYTES=64K"
  PASS_REGULAR_EXPRESSION "link 8 Gbps.*link 2 Gbps.*shards: in proportion to link speed; WRITE/READ under 64K bytes whole on one NIC")

# Soak: 10^7 operations with reordering, delays and injected failures; every
# request completes once and every ImmCounter ends exact (tools/te-soak).
add_test(NAME soak_loopback_1e7 COMMAND te-soak --ops 10000000 --seconds 400)
set_tests_properties(soak_loopback_1e7 PROPERTIES ENVIRONMENT "${TE_CONF_ENV}"
  TIMEOUT 600 PASS_REGULAR_EXPRESSION "te-soak: OK" LABELS soak)
# The same with two subsystems on the receiver, each in its own immediate
# space, using equal indexes: 0 arrivals credited across spaces.
add_test(NAME soak_loopback_spaces_1e7 COMMAND te-soak --ops 10000000 --seconds 400 --spaces)
set_tests_properties(soak_loopback_spaces_1e7 PROPERTIES ENVIRONMENT "${TE_CONF_ENV}"
  TIMEOUT 600 PASS_REGULAR_EXPRESSION "te-soak: OK" LABELS soak)

# Peers with different NIC counts (the authors require equal counts).
te_conformance(loopback_2to4nic_twoproc --two-process
  --set engine.nics_per_group=2 --remote-set engine.nics_per_group=4)
te_conformance(loopback_4to1nic_inproc
  --set engine.nics_per_group=4 --remote-set engine.nics_per_group=1)
te_conformance(loopback_3to2nic_inproc_reorder
  --set engine.nics_per_group=3 --remote-set engine.nics_per_group=2
  --set loopback.fault_reorder=true)
