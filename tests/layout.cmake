# The growth rule of the public structs (docs/abi.md): a program built
# against each frozen copy of te.h in tests/abi/layout-*/ must keep working
# with the current library. One executable and one test per frozen copy.
file(GLOB TE_FROZEN_LAYOUTS LIST_DIRECTORIES true ${CMAKE_CURRENT_SOURCE_DIR}/abi/layout-*)
foreach(dir ${TE_FROZEN_LAYOUTS})
  get_filename_component(ver ${dir} NAME)
  string(REGEX REPLACE "[.-]" "_" ver ${ver})
  set(exe abi_old_${ver})
  add_executable(${exe} ${CMAKE_CURRENT_SOURCE_DIR}/abi/old_layout_client.c)
  # The frozen header must win over include/ (which the library target adds).
  target_include_directories(${exe} BEFORE PRIVATE ${dir})
  target_link_libraries(${exe} PRIVATE transferengine)
  add_test(NAME ${exe} COMMAND ${exe})
  set_tests_properties(${exe} PROPERTIES TIMEOUT 60
    ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}")
  if(TARGET te-plugin-loopback)
    add_dependencies(${exe} te-plugin-loopback)
  endif()
endforeach()
