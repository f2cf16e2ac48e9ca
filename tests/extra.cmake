# Extra test targets, included by tests/CMakeLists.txt.
#
# 1. ABI test plugins (tests/abi/abi_plugin.c built once per variant) for
#    tests/unit/test_abi.c, placed in ${CMAKE_CURRENT_BINARY_DIR}/abi-plugins:
#      abi-plugins/libte-plugin-NAME.so      one per variant
#      abi-plugins/first/libte-plugin-dup.so     version "first"  (search order)
#      abi-plugins/second/libte-plugin-dup.so    version "second"
#      abi-plugins/first/libte-plugin-stop.so    refused (ABI 2.0): stops the search
#      abi-plugins/second/libte-plugin-stop.so   valid, must never be reached
#      abi-plugins/second/libte-plugin-only2.so  only in the second directory
# 2. out_of_tree_plugin: installs the project into the build tree, moves the
#    install, builds the installed plugin skeleton against the installed
#    header alone and a program per library with pkg-config and CMake
#    (tests/out-of-tree/run.sh, docs/install.md).

set(TE_ABI_PLUGIN_DIR ${CMAKE_CURRENT_BINARY_DIR}/abi-plugins)
set(TE_ABI_PLUGIN_TARGETS)

# te_abi_plugin(<target> <file name> <subdir or "."> <name> <version> [defines...])
function(te_abi_plugin target name subdir tname tversion)
  add_library(${target} MODULE ${CMAKE_CURRENT_SOURCE_DIR}/abi/abi_plugin.c)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(${target} PRIVATE
    TP_NAME="${tname}" TP_VERSION="${tversion}" ${ARGN})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib" OUTPUT_NAME "te-plugin-${name}"
    LIBRARY_OUTPUT_DIRECTORY ${TE_ABI_PLUGIN_DIR}/${subdir}
    C_VISIBILITY_PRESET hidden)
  set(TE_ABI_PLUGIN_TARGETS ${TE_ABI_PLUGIN_TARGETS} ${target} PARENT_SCOPE)
endfunction()

te_abi_plugin(te_abi_good      good      . good      1.2.3)
te_abi_plugin(te_abi_oldminor  oldminor  . oldminor  1.0.0 TP_OLDMINOR)
te_abi_plugin(te_abi_newminor  newminor  . newminor  1.7.0 TP_NEWMINOR)
te_abi_plugin(te_abi_newmajor  newmajor  . newmajor  2.0.0 TP_NEWMAJOR)
te_abi_plugin(te_abi_short     short     . short     0.0.1 TP_SHORT)
te_abi_plugin(te_abi_nosym     nosym     . nosym     0.0.1 TP_NOSYM)
te_abi_plugin(te_abi_nullfn    nullfn    . nullfn    0.0.1 TP_NULLFN)
te_abi_plugin(te_abi_entrynull entrynull . entrynull 0.0.1 TP_ENTRYNULL)
te_abi_plugin(te_abi_cfgdup    cfgdup    . cfgdup    0.0.1 TP_CFG_DUP)
te_abi_plugin(te_abi_cfgnodef  cfgnodef  . cfgnodef  0.0.1 TP_CFG_NODEFAULT)
te_abi_plugin(te_abi_cfgrange  cfgrange  . cfgrange  0.0.1 TP_CFG_RANGE)
te_abi_plugin(te_abi_cfgchoice cfgchoice . cfgchoice 0.0.1 TP_CFG_CHOICES)
te_abi_plugin(te_abi_cfgname   cfgname   . cfgname   0.0.1 TP_CFG_NAME)
te_abi_plugin(te_abi_cfgtype   cfgtype   . cfgtype   0.0.1 TP_CFG_TYPE)
te_abi_plugin(te_abi_cfgsize   cfgsize   . cfgsize   0.0.1 TP_CFG_SIZE)
te_abi_plugin(te_abi_dup1      dup       first  dup   first)
te_abi_plugin(te_abi_dup2      dup       second dup   second)
te_abi_plugin(te_abi_stop1     stop      first  stop  first TP_NEWMAJOR)
te_abi_plugin(te_abi_stop2     stop      second stop  second)
te_abi_plugin(te_abi_only2     only2     second only2 second)

# A file that is not a shared object at all: dlopen() must fail cleanly.
file(MAKE_DIRECTORY ${TE_ABI_PLUGIN_DIR}/junk)
file(WRITE ${TE_ABI_PLUGIN_DIR}/junk/libte-plugin-junk.so "not an ELF file\n")

if(TARGET test_abi)
  add_dependencies(test_abi ${TE_ABI_PLUGIN_TARGETS})
  target_compile_definitions(test_abi PRIVATE
    TE_ABI_PLUGIN_DIR="${TE_ABI_PLUGIN_DIR}")
endif()

# ------------------------------------------------------- out-of-tree plugin
add_test(NAME out_of_tree_plugin
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/out-of-tree/run.sh
          ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/out-of-tree-work)
set_tests_properties(out_of_tree_plugin PROPERTIES
  TIMEOUT 600 LABELS "install"
  ENVIRONMENT "CMAKE_COMMAND=${CMAKE_COMMAND};CC=${CMAKE_C_COMPILER}")
