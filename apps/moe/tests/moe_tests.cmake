# te-moe's command line and its runs over the efa plugin (libfabric's shm
# provider, this machine); included by apps/moe/CMakeLists.txt.

# --help exits 0 and lists every option; a bad number, option or setting
# exits non-zero naming it (tests/cli_check.sh checks status and output).
set(MOE_CLI ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli_check.sh)
set(MOE_HELP_OPTS -e "--ranks R .*\\[8\\]" -e "--experts E .*\\[256\\]"
    -e "--topk K .*\\[8\\]" -e "--hidden H .*\\[7168\\]" -e "--tokens T"
    -e "--private P" -e "--batches B .*\\[run: 3, bench: 20\\]"
    -e "--repeat N" -e "--bf16 .*\\[fp32\\]" -e "--skew" -e "--inplace" -e "--timeout-ms MS .*\\[5000\\]"
    -e "--set S.K=V" -e "-h, --help")
add_test(NAME moe_cli_help COMMAND ${MOE_CLI} zero ${MOE_HELP_OPTS}
         -e "^  run  " -e "^  bench  " -- $<TARGET_FILE:te-moe-tool> --help)
add_test(NAME moe_cli_run_help COMMAND ${MOE_CLI} zero ${MOE_HELP_OPTS}
         -- $<TARGET_FILE:te-moe-tool> run --help)
add_test(NAME moe_cli_bench_help COMMAND ${MOE_CLI} zero ${MOE_HELP_OPTS}
         -- $<TARGET_FILE:te-moe-tool> bench --ranks 2 --help)
add_test(NAME moe_cli_bad_number COMMAND ${MOE_CLI} nonzero
         -e "--tokens: expected a whole number in 1..65536, got \"12x\""
         -- $<TARGET_FILE:te-moe-tool> run --tokens 12x)
add_test(NAME moe_cli_number_out_of_range COMMAND ${MOE_CLI} nonzero
         -e "--ranks: expected a whole number in 1..64, got \"65\""
         -- $<TARGET_FILE:te-moe-tool> bench --ranks 65)
add_test(NAME moe_cli_bad_option COMMAND ${MOE_CLI} nonzero
         -e "te-moe bench: unknown option \"--frob\"" -e "te-moe bench --help"
         -- $<TARGET_FILE:te-moe-tool> bench --frob)
add_test(NAME moe_cli_missing_value COMMAND ${MOE_CLI} nonzero
         -e "option --hidden needs a value"
         -- $<TARGET_FILE:te-moe-tool> run --hidden)
add_test(NAME moe_cli_bad_set COMMAND ${MOE_CLI} nonzero
         -e "--set: expected section.key=value, got \"efa\""
         -- $<TARGET_FILE:te-moe-tool> run --set efa)
add_test(NAME moe_cli_unknown_key COMMAND ${MOE_CLI} nonzero
         -e "unknown key \"bogus\" in section \\[engine\\]" -e "te-moe run: FAILED"
         -- $<TARGET_FILE:te-moe-tool> run --ranks 2 --experts 8 --hidden 64
            --tokens 8 --set engine.bogus=1)
add_test(NAME moe_cli_bad_shape COMMAND ${MOE_CLI} nonzero
         -e "experts 12 \\(a multiple of ranks" -e "te-moe run: FAILED"
         -- $<TARGET_FILE:te-moe-tool> run --ranks 8 --experts 12 --hidden 64
            --tokens 8)
# --skew with fewer experts on rank 0 than top-k: refused (it looped
# forever drawing distinct experts before).
add_test(NAME moe_cli_skew_topk COMMAND ${MOE_CLI} nonzero
         -e "--skew routes to rank 0's 4 experts: fewer than --topk 8"
         -- $<TARGET_FILE:te-moe-tool> run --ranks 8 --experts 32 --topk 8 --skew
            --hidden 64 --tokens 8)
# In place (te_moe_rank_input): every value equal to the reference, and
# the two writes of a span per peer (dispatch 2..2 with all tokens routed
# everywhere at top-8 of 8 experts on 2 ranks).
add_test(NAME moe_run_inplace COMMAND ${MOE_CLI} zero
         -e "batch 2: ok, 0 values differ" -e "dispatch 2\\.\\.2, combine 1\\.\\.1"
         -e "te-moe run: OK"
         -- $<TARGET_FILE:te-moe-tool> run --ranks 2 --experts 8 --topk 8
            --hidden 64 --tokens 40 --inplace)
add_test(NAME moe_cli_unknown_command COMMAND ${MOE_CLI} nonzero
         -e "unknown command \"frob\"" -e "usage: te-moe run\\|bench"
         -- $<TARGET_FILE:te-moe-tool> frob)
set_tests_properties(moe_cli_help moe_cli_run_help moe_cli_bench_help
  moe_cli_bad_number moe_cli_number_out_of_range moe_cli_bad_option
  moe_cli_missing_value moe_cli_bad_set moe_cli_unknown_key moe_cli_bad_shape
  moe_cli_skew_topk moe_run_inplace moe_cli_unknown_command PROPERTIES LABELS moe TIMEOUT 60
  ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}"
  PASS_REGULAR_EXPRESSION "cli_check: ok")

# te-moe run over the efa plugin with libfabric's shm provider: every value
# equal to the dense reference, writes per peer checked (dispatch 1..2,
# combine 1), for several R / top-k, bf16 and skewed routing, P = 0, and
# two NICs per rank (writes pinned by destination). The output must name
# the efa plugin and its shm NICs: no silent fallback to another transport.
if(TARGET te-plugin-efa)
  set(MOE_EFA_SHM --set engine.plugin=efa --set efa.provider=shm)
  function(moe_run_efa name)
    add_test(NAME ${name} COMMAND te-moe-tool run ${MOE_EFA_SHM} ${ARGN})
    set_tests_properties(${name} PROPERTIES LABELS "moe;efa" TIMEOUT 120
      ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}"
      PASS_REGULAR_EXPRESSION "plugin efa, [0-9]+ NICs?: shm:shm.*te-moe run: OK"
      FAIL_REGULAR_EXPRESSION "FAILED|WRONG")
  endfunction()
  moe_run_efa(moe_run_efa_shm --ranks 4 --topk 8 --experts 32 --hidden 256
              --tokens 64 --batches 3)
  moe_run_efa(moe_run_efa_shm_r2_top1 --ranks 2 --topk 1 --experts 8
              --hidden 256 --tokens 64 --batches 3)
  moe_run_efa(moe_run_efa_shm_r8_top2 --ranks 8 --topk 2 --experts 64
              --hidden 128 --tokens 48 --batches 3)
  moe_run_efa(moe_run_efa_shm_r8_top8_bf16_skew --ranks 8 --topk 8
              --experts 64 --hidden 128 --tokens 48 --batches 2 --bf16 --skew)
  moe_run_efa(moe_run_efa_shm_private0 --ranks 4 --topk 2 --experts 16
              --hidden 256 --tokens 32 --private 0 --batches 2)
  # Caller-driven progress: no engine threads, each rank's waits progress
  # its engine (before: the writes' callbacks never ran and every batch
  # failed at its deadline with "writes not completed").
  moe_run_efa(moe_run_efa_shm_caller --ranks 4 --topk 2 --experts 16
              --hidden 256 --tokens 32 --batches 3
              --set engine.progress=caller)
  moe_run_efa(moe_run_efa_shm_2nic --ranks 4 --topk 2 --experts 16
              --hidden 256 --tokens 32 --batches 2
              --set engine.nics_per_group=2 --set efa.devices=2)
  # Heartbeats every 1 ms: while the job closes, idle engines heartbeat
  # their peers; a peer whose engine is already destroyed (its shm
  # endpoint closed, in this process) crashed the process inside
  # libfabric (SIGSEGV in shm's peer lock) until te_moe_rank_disconnect
  # removed every rank's peers before any engine went.
  moe_run_efa(moe_run_efa_shm_heartbeat_close --ranks 8 --topk 2
              --experts 64 --hidden 64 --tokens 16 --batches 2
              --set engine.heartbeat_ms=1)

  # te-moe bench over shm runs both protocols and reports the writes per
  # peer: at most 2 dispatch, exactly 1 combine (naive: one per row).
  add_test(NAME moe_bench_efa_shm_smoke COMMAND te-moe-tool bench
           ${MOE_EFA_SHM} --ranks 4 --topk 8 --experts 32 --hidden 128
           --tokens 32 --batches 2 --repeat 3)
  set_tests_properties(moe_bench_efa_shm_smoke PROPERTIES LABELS "moe;efa"
    TIMEOUT 120 ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}"
    PASS_REGULAR_EXPRESSION "\"transport\": \"plugin efa, 1 NIC: shm:shm\".*\"dispatch_writes_per_peer_max\": [12], .*\"combine_writes_per_peer\": 1.00, .*\"naive_dispatch_writes_per_peer\": ([3-9]|[1-9][0-9])\\..*\"summary\": true"
    FAIL_REGULAR_EXPRESSION "failed")
  add_dependencies(te-moe-tool te-plugin-efa)
endif()

# A submission queue of 2 requests: te_submit answers -EAGAIN for most
# writes, and the completions taken to make room must still be counted
# (before: they were dropped and the batch failed with "N writes not
# completed" at its deadline).
add_test(NAME moe_run_submit_queue_full COMMAND te-moe-tool run --ranks 8
         --topk 2 --experts 64 --hidden 64 --tokens 48 --private 0
         --batches 3 --set engine.submit_queue_depth=2)
# The same over loopback in caller mode (its NICs have wait objects: the
# ranks block in te_progress_wait between events).
add_test(NAME moe_run_loopback_caller COMMAND te-moe-tool run --ranks 4
         --topk 2 --experts 16 --hidden 128 --tokens 32 --batches 3
         --set engine.progress=caller)
set_tests_properties(moe_run_loopback_caller PROPERTIES LABELS moe
  TIMEOUT 120 ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}"
  PASS_REGULAR_EXPRESSION "te-moe run: OK" FAIL_REGULAR_EXPRESSION "FAILED|WRONG")
set_tests_properties(moe_run_submit_queue_full PROPERTIES LABELS moe
  TIMEOUT 120 ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}"
  PASS_REGULAR_EXPRESSION "te-moe run: OK" FAIL_REGULAR_EXPRESSION "FAILED|WRONG")
