# Tests of apps/kvcache (docs/kvcache.md), prefix kvcache_.
pkg_check_modules(TE_KV_CHECK REQUIRED IMPORTED_TARGET check)
foreach(t test_kv_units test_kv_transfer)
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

# The demo: prefiller processes and a decoder meet in the embedded store.
add_test(NAME kvcache_demo COMMAND te-kv-tool demo --model qwen3-235b-a22b
         --layers 6 --tokens 256 --prefillers 2 --requests 6 --layer-us 200)
set_tests_properties(kvcache_demo PROPERTIES TIMEOUT 120 LABELS kvcache
  ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}"
  PASS_REGULAR_EXPRESSION "te-kv demo: OK")

# Membership through a real etcd (Debian etcd-server) started on 127.0.0.1
# with a temporary data dir by scripts/etcd-run.sh and stopped after.
add_test(NAME kvcache_etcd
  COMMAND ${PROJECT_SOURCE_DIR}/scripts/etcd-run.sh
          ${CMAKE_CURRENT_SOURCE_DIR}/tests/etcd-membership.sh $<TARGET_FILE:te-kv-tool>)
set_tests_properties(kvcache_etcd PROPERTIES TIMEOUT 180 LABELS "kvcache;etcd"
  ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}" SKIP_RETURN_CODE 77)
