# te-bench smoke runs (included by tests/CMakeLists.txt). They check that the
# benchmark runs every test in one and in two processes and that its JSON is
# well-formed and complete. Benchmarks are not tests: no wall-clock
# thresholds here; docs/benchmarks.md has the method and the numbers.
if(TARGET te-bench)
  set(TE_BENCH_ENV "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}")
  # Tiny sizes, one short repetition: seconds, not minutes.
  set(TE_BENCH_SMOKE --test all --size 4K --page 1K --peers 3 --nics 2
      --imm-batch 16 --reps 1 --warmup 0 --rep-ms 5 --min-iters 4
      --lat-iters 20 --verify --timeout 30 --no-progress)

  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    set(TE_BENCH_CHECK ${Python3_EXECUTABLE}
        ${PROJECT_SOURCE_DIR}/tools/te-bench/check_json.py $<TARGET_FILE:te-bench>)
    add_test(NAME bench_smoke_inproc_json
             COMMAND ${TE_BENCH_CHECK} ${TE_BENCH_SMOKE})
    add_test(NAME bench_smoke_twoproc_json
             COMMAND ${TE_BENCH_CHECK} ${TE_BENCH_SMOKE} --two-process
                     --addr 127.0.0.1)
    set_tests_properties(bench_smoke_inproc_json bench_smoke_twoproc_json
      PROPERTIES ENVIRONMENT "${TE_BENCH_ENV}" TIMEOUT 300 LABELS bench
      PASS_REGULAR_EXPRESSION "check_json: OK")
  endif()

  # The one-process idle-turn cost (caller mode) on both plugins: it
  # runs and reports; te_progress finding work on an idle engine fails it.
  add_test(NAME bench_idleturn_loopback
           COMMAND te-bench --test idleturn --iters 20000 --reps 2)
  set(TE_BENCH_IDLETURN bench_idleturn_loopback)
  if(TARGET te-plugin-efa)
    add_test(NAME bench_idleturn_efa_shm
             COMMAND te-bench --test idleturn --iters 20000 --reps 2
                     --set engine.plugin=efa --set efa.provider=shm)
    list(APPEND TE_BENCH_IDLETURN bench_idleturn_efa_shm)
  endif()
  set_tests_properties(${TE_BENCH_IDLETURN} PROPERTIES
    ENVIRONMENT "${TE_BENCH_ENV}" TIMEOUT 60 LABELS bench
    PASS_REGULAR_EXPRESSION "idle_turn_ns [0-9.]+ .*turn/clock")

  # The pair script of docs/benchmarks.md ("Cold submits") runs a round
  # and its summary reads every series and the UCX reference back.
  if(TARGET ucx-raw-bench AND Python3_Interpreter_FOUND)
    add_test(NAME bench_ab_immlat_round COMMAND sh -c
      "d=$(mktemp -d) && ${PROJECT_SOURCE_DIR}/tools/te-bench/ab-immlat.sh ${CMAKE_BINARY_DIR} ${CMAKE_BINARY_DIR} $d 1 --plugin loopback --lat-iters 200 && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/te-bench/ab-immlat-summary.py $d; rc=$?; cat $d/*.err; rm -rf $d; exit $rc")
    set_tests_properties(bench_ab_immlat_round PROPERTIES TIMEOUT 120
      LABELS bench PASS_REGULAR_EXPRESSION
      "1 rounds with both builds.*te_submit\\(\\) call.*end to end.*UCX \\(same runs\\)")
  endif()

  # The table (what people read) and --help (every option documented).
  add_test(NAME bench_smoke_table
           COMMAND te-bench --test write,imm --size 4K --reps 1 --warmup 0
                   --rep-ms 5 --min-iters 4 --imm-batch 16 --no-progress)
  set_tests_properties(bench_smoke_table PROPERTIES
    ENVIRONMENT "${TE_BENCH_ENV}" TIMEOUT 120 LABELS bench
    PASS_REGULAR_EXPRESSION "write +4 KiB"
    FAIL_REGULAR_EXPRESSION "FAILED")
  add_test(NAME bench_help COMMAND te-bench --help)
  set_tests_properties(bench_help PROPERTIES LABELS bench
    PASS_REGULAR_EXPRESSION "--reference memcpy\\|none\\|CMD")
  # Every long option of the parser appears in --help.
  add_test(NAME bench_help_complete COMMAND sh -c
    "n=0; for o in $(grep -o '{\"[a-z-]*\",' ${PROJECT_SOURCE_DIR}/tools/te-bench/options.c | tr -d '{\",'); do n=$((n+1)); $<TARGET_FILE:te-bench> --help | grep -q -- --$o || { echo missing --$o; exit 1; }; done; [ $n -ge 20 ] && echo all $n options documented")
  set_tests_properties(bench_help_complete PROPERTIES LABELS bench
    PASS_REGULAR_EXPRESSION "all [0-9]+ options documented")
endif()
