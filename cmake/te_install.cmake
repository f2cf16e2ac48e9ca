# Installing a TransferEngine library so that an installed prefix can be
# consumed, and moved, with pkg-config or CMake (docs/install.md).
#
# te_pc_dirs()
#   Sets TE_PC_PREFIX, TE_PC_LIBDIR and TE_PC_INCLUDEDIR (in the caller's
#   scope) for a .pc file installed in <libdir>/pkgconfig. The prefix is
#   derived from the .pc file's own directory (${pcfiledir}, which pkg-config
#   and pkgconf both define), so `cmake --install --prefix DIR` or moving the
#   installed tree keeps it right. An absolute CMAKE_INSTALL_LIBDIR or
#   INCLUDEDIR is written as is: such an install is not relocatable.
#
# te_install_component(<target> COMPONENT <name> DESCRIPTION <text>
#                      HEADERS <file>... [REQUIRES <pc module>...])
#   Installs the shared library <target> and its public headers (into
#   <includedir>/te), a relocatable <target>.pc (Requires: transferengine
#   and REQUIRES), and the CMake export file of component <name> of the
#   TransferEngine package: find_package(TransferEngine COMPONENTS <name>)
#   then gives TransferEngine::<target>. Each app calls this from its own
#   CMakeLists.txt; the component list reaches TransferEngineConfig.cmake
#   through the global property TE_PACKAGE_COMPONENTS.
include_guard(GLOBAL)
include(GNUInstallDirs)

function(te_pc_dirs)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    set(prefix "${CMAKE_INSTALL_PREFIX}")
    set(libdir "${CMAKE_INSTALL_LIBDIR}")
  else()
    # <prefix>/<libdir>/pkgconfig back to <prefix>: one ".." per component.
    file(RELATIVE_PATH up "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
    string(REGEX REPLACE "/$" "" up "${up}")
    set(prefix "\${pcfiledir}/${up}")
    set(libdir "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  endif()
  if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(includedir "${CMAKE_INSTALL_INCLUDEDIR}")
  else()
    set(includedir "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
  endif()
  set(TE_PC_PREFIX "${prefix}" PARENT_SCOPE)
  set(TE_PC_LIBDIR "${libdir}" PARENT_SCOPE)
  set(TE_PC_INCLUDEDIR "${includedir}" PARENT_SCOPE)
endfunction()

function(te_install_component target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "COMPONENT;DESCRIPTION" "HEADERS;REQUIRES")
  if(NOT arg_COMPONENT OR NOT arg_DESCRIPTION OR NOT arg_HEADERS)
    message(FATAL_ERROR "te_install_component(${target}): COMPONENT, DESCRIPTION and HEADERS are required")
  endif()
  # Consumers of the installed target find its headers under <includedir>
  # (te/<name>.h), unless the app already says so itself.
  get_target_property(incs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT "${incs}" MATCHES "INSTALL_INTERFACE")
    target_include_directories(${target} INTERFACE
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  endif()
  # Installed beside libtransferengine (and te-moe): its own directory is
  # where its dependencies are, whatever the depth of <libdir> (the global
  # $ORIGIN/../<libdir> is right for bin/ only).
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN")
  set(export_set TransferEngine-${arg_COMPONENT})
  install(TARGETS ${target} EXPORT ${export_set}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(FILES ${arg_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/te)
  # Beside TransferEngineConfig.cmake, which includes it; a separate export
  # set per app, so an app that is not built leaves no dangling reference.
  install(EXPORT ${export_set} NAMESPACE TransferEngine::
    FILE TransferEngine-${arg_COMPONENT}-targets.cmake
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/TransferEngine)

  te_pc_dirs()
  set(TE_PC_NAME ${target})
  set(TE_PC_DESCRIPTION "${arg_DESCRIPTION}")
  list(JOIN arg_REQUIRES ", " extra)
  set(TE_PC_REQUIRES "transferengine = ${PROJECT_VERSION}")
  if(extra)
    string(APPEND TE_PC_REQUIRES ", ${extra}")
  endif()
  # The library name without its "lib" prefix, as -l wants it.
  get_target_property(out ${target} OUTPUT_NAME)
  if(NOT out)
    set(out ${target})
  endif()
  set(TE_PC_LIB ${out})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/te-library.pc.in
    ${CMAKE_BINARY_DIR}/pkgconfig/${target}.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/pkgconfig/${target}.pc
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  set_property(GLOBAL APPEND PROPERTY TE_PACKAGE_COMPONENTS ${arg_COMPONENT})
endfunction()
