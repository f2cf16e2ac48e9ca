# Exported symbols (docs/abi.md): each shared library exports exactly the
# TE_API functions of its public headers, under their version nodes. The
# library list is every target te_version_script() was applied to (its
# TE_EXPORT_SPEC property: NODE <name> <header>...).
foreach(lib transferengine te-kv te-weights te-moe te-moe-gpu)
  if(NOT TARGET ${lib})
    continue()
  endif()
  get_target_property(spec ${lib} TE_EXPORT_SPEC)
  if(NOT spec)
    message(FATAL_ERROR "tests/abi.cmake: ${lib} has no version script (te_version_script)")
  endif()
  add_test(NAME abi_exports_${lib}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/abi/exports.sh $<TARGET_FILE:${lib}> ${spec})
  set_tests_properties(abi_exports_${lib} PROPERTIES LABELS "abi;unit" TIMEOUT 60)
endforeach()
