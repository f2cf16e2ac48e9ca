# Command-line tools: the bad-input sweep (tests/cli/run.sh runs every
# tests/cli/*.tsv table) and te-kv demo on a loaded machine. docs/tools.md.
add_test(NAME cli_bad_input
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/run.sh ${CMAKE_BINARY_DIR})
set_tests_properties(cli_bad_input PROPERTIES TIMEOUT 600 LABELS cli
  ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}")
if(TARGET te-kv-tool)
  add_test(NAME kvcache_demo_loaded
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/kv_demo_loaded.sh ${CMAKE_BINARY_DIR})
  # RUN_SERIAL: its busy loops are the load it is about; under ctest -j
  # they would also load (and slow) whatever test ran beside it.
  set_tests_properties(kvcache_demo_loaded PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE
    LABELS "cli;kvcache" ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}")
  add_test(NAME kvcache_decode_mismatch
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/kv_decode_mismatch.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(kvcache_decode_mismatch PROPERTIES TIMEOUT 300
    LABELS "cli;kvcache" ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}")
endif()
