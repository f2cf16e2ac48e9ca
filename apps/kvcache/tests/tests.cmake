# Tests of apps/kvcache (docs/kvcache.md), prefix kvcache_.
pkg_check_modules(TE_KV_CHECK REQUIRED IMPORTED_TARGET check)
foreach(t test_kv_units test_kv_transfer test_kv_soak test_kv_badreq
          test_kv_cache)
  add_executable(${t} ${CMAKE_CURRENT_SOURCE_DIR}/tests/${t}.c)
  target_link_libraries(${t} PRIVATE te-kv PkgConfig::TE_KV_CHECK)
  target_include_directories(${t} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  string(REPLACE "test_kv_" "kvcache_" name ${t})
  add_test(NAME ${name} COMMAND ${t})
  set_tests_properties(${name} PROPERTIES TIMEOUT 300 LABELS kvcache
    ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR};CK_DEFAULT_TIMEOUT=120")
  if(TARGET te-plugin-loopback)
    add_dependencies(${t} te-plugin-loopback)
  endif()
endforeach()

# The engine's cache in device memory with GPU-reported layers (label gpu;
# exits 77 without a usable device; scripts/gpu-check.sh runs it).
if(TARGET te_cuda_kernels)
  add_executable(test_kv_gpu ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_kv_gpu.c)
  target_link_libraries(test_kv_gpu PRIVATE te-kv te_cuda_kernels
                        PkgConfig::TE_KV_CHECK)
  add_test(NAME kvcache_gpu COMMAND test_kv_gpu)
  set_tests_properties(kvcache_gpu PROPERTIES TIMEOUT 180 LABELS "kvcache;gpu"
    SKIP_RETURN_CODE 77
    ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR};CK_DEFAULT_TIMEOUT=120")
  if(TARGET te-plugin-loopback)
    add_dependencies(test_kv_gpu te-plugin-loopback)
  endif()
endif()

# The demo: prefiller processes and a decoder meet in the embedded store.
add_test(NAME kvcache_demo COMMAND te-kv-tool demo --model qwen3-235b-a22b
         --layers 6 --tokens 256 --prefillers 2 --requests 6 --layer-us 200)
set_tests_properties(kvcache_demo PROPERTIES TIMEOUT 120 LABELS kvcache
  ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}"
  PASS_REGULAR_EXPRESSION "te-kv demo: OK")

# The demo in caller-driven progress: the tool runs one thread per engine
# that progresses it (the libraries react in callbacks; before, every
# request was fenced at the ACCEPT deadline).
add_test(NAME kvcache_demo_caller COMMAND te-kv-tool demo --model qwen3-235b-a22b
         --layers 6 --tokens 256 --prefillers 2 --requests 6 --layer-us 200
         --set engine.progress=caller)
set_tests_properties(kvcache_demo_caller PROPERTIES TIMEOUT 120 LABELS kvcache
  ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}"
  PASS_REGULAR_EXPRESSION "te-kv demo: OK")

# Membership through a real etcd (Debian etcd-server) started on 127.0.0.1
# with a temporary data dir by scripts/etcd-run.sh and stopped after.
add_test(NAME kvcache_etcd
  COMMAND ${PROJECT_SOURCE_DIR}/scripts/etcd-run.sh
          ${CMAKE_CURRENT_SOURCE_DIR}/tests/etcd-membership.sh $<TARGET_FILE:te-kv-tool>)
set_tests_properties(kvcache_etcd PROPERTIES TIMEOUT 180 LABELS "kvcache;etcd"
  ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}" SKIP_RETURN_CODE 77)

# The tool's command line: --help, and a bad number named, not read as 0.
add_test(NAME kvcache_cli_help COMMAND te-kv-tool --help)
set_tests_properties(kvcache_cli_help PROPERTIES LABELS kvcache
  PASS_REGULAR_EXPRESSION "roles:.*demo.*prefill.*decode.*bench")
add_test(NAME kvcache_cli_bad_number COMMAND te-kv-tool demo --tokens 12x)
set_tests_properties(kvcache_cli_bad_number PROPERTIES LABELS kvcache
  PASS_REGULAR_EXPRESSION "--tokens: expected a whole number.*got \"12x\"")

# The soak again on a loopback that reorders execution and completions and
# delays every operation: two-sided messages overtake each other (a CANCEL
# its REQUEST, a REQUEST its HELLO), as on EFA's SRD.
add_test(NAME kvcache_soak_faults COMMAND test_kv_soak)
set_tests_properties(kvcache_soak_faults PROPERTIES TIMEOUT 300 LABELS kvcache
  ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR};CK_DEFAULT_TIMEOUT=120;TE_LOOPBACK_FAULT_REORDER=true;TE_LOOPBACK_FAULT_DELAY_US=50;TE_KV_SOAK_REQUESTS=2000")

# Two hosts on one machine: etcd and decoders in one network namespace,
# prefiller processes in another, over the efa plugin with tcp;ofi_rxm
# across a veth pair (198.51.100.0/24); transfer, cancel and kill runs.
# Root only (namespaces): skipped (77) otherwise, or without etcd or the
# efa plugin.
add_test(NAME kvcache_netns_efa_tcp
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/netns.sh $<TARGET_FILE:te-kv-tool>)
set_tests_properties(kvcache_netns_efa_tcp PROPERTIES TIMEOUT 300
  LABELS "kvcache;efa;netns" RUN_SERIAL TRUE SKIP_RETURN_CODE 77
  ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}"
  PASS_REGULAR_EXPRESSION "kvcache_netns_efa_tcp: PASS")

# The engine-owned way's per-layer notify latency against the raw core in
# the same run (docs/kvcache.md, Measured): a benchmark, run here only to
# prove it works (no threshold).
add_executable(bench_kv_cache ${CMAKE_CURRENT_SOURCE_DIR}/tests/bench_kv_cache.c)
target_link_libraries(bench_kv_cache PRIVATE te-kv)
add_test(NAME kvcache_bench_cache COMMAND bench_kv_cache 20 1)
set_tests_properties(kvcache_bench_cache PROPERTIES TIMEOUT 120 LABELS kvcache
  ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}"
  PASS_REGULAR_EXPRESSION "ratio of medians")
