# The misbehaving test transport (tests/hostile/hostile_plugin.c) and the
# test of the core's plugin contract guard that loads it
# (tests/unit/test_hostile_plugin.c). Built into its own directory, so no
# other test finds it on TE_PLUGIN_PATH.
set(TE_HOSTILE_PLUGIN_DIR ${CMAKE_CURRENT_BINARY_DIR}/hostile-plugin)
add_library(te-plugin-hostile MODULE
  ${CMAKE_CURRENT_SOURCE_DIR}/hostile/hostile_plugin.c)
target_include_directories(te-plugin-hostile PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(te-plugin-hostile PRIVATE Threads::Threads)
set_target_properties(te-plugin-hostile PROPERTIES
  PREFIX "lib" OUTPUT_NAME "te-plugin-hostile"
  LIBRARY_OUTPUT_DIRECTORY ${TE_HOSTILE_PLUGIN_DIR}
  C_VISIBILITY_PRESET hidden)
if(TARGET test_hostile_plugin)
  add_dependencies(test_hostile_plugin te-plugin-hostile)
  target_compile_definitions(test_hostile_plugin PRIVATE
    TE_HOSTILE_PLUGIN_DIR="${TE_HOSTILE_PLUGIN_DIR}")
endif()
