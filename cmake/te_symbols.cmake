# Exported symbols of the project's shared libraries (docs/abi.md, "Exported
# symbols"). A library exports exactly the functions its public headers
# declare with TE_API, each under a symbol version node; everything else is
# local. The list is never written by hand: the linker version script is
# generated at build time from the headers, so a function added to a header
# with TE_API is exported (and a declaration without TE_API is not).
# tests/abi/exports.sh checks the result with readelf on the built library.
#
# Two uses:
#   include(te_symbols) + te_version_script(<target> <NODE> <header>...
#                                           [NODE <NODE2> <header>...])
#     generates <binary dir>/<target>.map from the headers (re-generated when
#     a header changes) and links the target with it;
#   cmake -DTE_SYMBOLS_OUT=<map> "-DTE_SYMBOLS_SPEC=NODE|NODE1|h1|h2|NODE|NODE2|h3"
#         -P te_symbols.cmake
#     the generator itself (what the build runs).

# The names declared with TE_API in one header: a declaration starts at the
# beginning of a line with "TE_API " and names its function before the first
# "(" on that line (the style of include/te/te.h and the apps' headers).
function(te_symbols_of_header header out_var)
  file(STRINGS ${header} lines REGEX "^TE_API[ \t]")
  set(names)
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "([A-Za-z_][A-Za-z0-9_]*)[ \t]*\\(")
      message(FATAL_ERROR "${header}: a TE_API declaration must name its "
                          "function before '(' on its first line: ${line}")
    endif()
    list(APPEND names ${CMAKE_MATCH_1})
  endforeach()
  set(${out_var} ${names} PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED TE_SYMBOLS_OUT)
  cmake_policy(VERSION 3.20)
  # Script mode: TE_SYMBOLS_SPEC is "NODE|<node name>|header...|NODE|..."
  string(CONCAT text
    "/* Generated from the TE_API declarations of the headers below by\n"
    "   cmake/te_symbols.cmake: do not edit. */\n")
  set(node "")
  set(expect_node FALSE)
  set(first TRUE)
  set(seen)
  macro(te_symbols_close)
    if(node)
      if(first)
        string(APPEND text "  local:\n    *;\n")
        set(first FALSE)
      endif()
      string(APPEND text "};\n")
    endif()
  endmacro()
  string(REPLACE "|" ";" spec "${TE_SYMBOLS_SPEC}")
  foreach(item IN LISTS spec)
    if(item STREQUAL "NODE")
      te_symbols_close()
      set(expect_node TRUE)
    elseif(expect_node)
      set(node ${item})
      set(expect_node FALSE)
      string(APPEND text "${node} {\n  global:\n")
    else()
      te_symbols_of_header(${item} names)
      if(NOT names)
        message(FATAL_ERROR "${item}: no TE_API declaration")
      endif()
      string(APPEND text "    /* ${item} */\n")
      foreach(n IN LISTS names)
        if(n IN_LIST seen)
          message(FATAL_ERROR "${item}: ${n} is declared with TE_API twice")
        endif()
        list(APPEND seen ${n})
        string(APPEND text "    ${n};\n")
      endforeach()
    endif()
  endforeach()
  te_symbols_close()
  file(WRITE ${TE_SYMBOLS_OUT} "${text}")
  return()
endif()

# te_version_script(<target> NODE <name> <header>... [NODE <name> <header>...])
# Headers are absolute paths. The first node also holds "local: *".
function(te_version_script target)
  set(script ${CMAKE_CURRENT_FUNCTION_LIST_FILE})
  set(map ${CMAKE_CURRENT_BINARY_DIR}/${target}.map)
  set(headers)
  foreach(item IN LISTS ARGN)
    if(IS_ABSOLUTE ${item})
      list(APPEND headers ${item})
    endif()
  endforeach()
  string(REPLACE ";" "|" spec "${ARGN}")
  add_custom_command(OUTPUT ${map}
    COMMAND ${CMAKE_COMMAND} -DTE_SYMBOLS_OUT=${map} "-DTE_SYMBOLS_SPEC=${spec}"
            -P ${script}
    DEPENDS ${headers} ${script}
    COMMENT "Generating the version script ${target}.map"
    VERBATIM)
  add_custom_target(${target}_symbols DEPENDS ${map})
  add_dependencies(${target} ${target}_symbols)
  target_link_options(${target} PRIVATE "LINKER:--version-script=${map}")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${map})
  # Read by tests/abi (the ABI test checks the exported set per library).
  set_property(TARGET ${target} PROPERTY TE_EXPORT_SPEC "${ARGN}")
endfunction()
