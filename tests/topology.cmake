# The stored fixture trees are exactly what make_fixtures.py generates.
find_program(TE_PYTHON3 python3)
if(TE_PYTHON3)
  add_test(NAME topology_fixtures_up_to_date
           COMMAND ${TE_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/fixtures/topology/make_fixtures.py --check)
endif()
add_test(NAME te_info_topology COMMAND te-info --topology)
set_tests_properties(te_info_topology PROPERTIES
  ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}" TIMEOUT 60
  PASS_REGULAR_EXPRESSION "GPUs: none.*used: the loopback plugin's NICs have no PCI address")
