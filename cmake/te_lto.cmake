# Link-time optimisation of the library and its plugins (TE_LTO, default
# ON): the per-operation path crosses many small files (request.c, shard.c,
# request_abi.c, mr.c, error.c, wait.c, ...), and a call or a jump that the
# branch predictor has not seen costs 2-3 ns each when the thread comes
# back from a sleep (docs/benchmarks.md, "Cold submits"). LTO inlines them
# into te_submit() and te_progress().
#
# Only for the optimised build types, and only with GCC: the objects stay
# "fat" (-ffat-lto-objects), so te_core, the tests' static archive of the
# same objects, links without LTO; sanitizer builds (Debug) are left alone.
option(TE_LTO "Link-time optimisation of libtransferengine and the plugins" ON)

set(TE_LTO_ACTIVE OFF)
if(TE_LTO AND CMAKE_C_COMPILER_ID STREQUAL "GNU" AND
   CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo|MinSizeRel)$")
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-flto=auto -ffat-lto-objects")
  check_c_source_compiles("int main(void) { return 0; }" TE_CC_HAS_LTO)
  unset(CMAKE_REQUIRED_FLAGS)
  if(TE_CC_HAS_LTO)
    set(TE_LTO_ACTIVE ON)
    # te-plugin-common is an archive linked into each plugin: gcc-ar
    # indexes its LTO symbols (plain ar may not find the LTO plugin).
    if(CMAKE_C_COMPILER_AR AND CMAKE_C_COMPILER_RANLIB)
      set(CMAKE_AR "${CMAKE_C_COMPILER_AR}")
      set(CMAKE_RANLIB "${CMAKE_C_COMPILER_RANLIB}")
    endif()
  endif()
endif()
message(STATUS "TransferEngine: link-time optimisation ${TE_LTO_ACTIVE}")

# te_lto(TARGET...): compile TARGET's C sources for LTO (fat objects) and,
# for shared and module libraries, link them with it.
function(te_lto)
  if(NOT TE_LTO_ACTIVE)
    return()
  endif()
  foreach(t ${ARGN})
    target_compile_options(${t} PRIVATE
      "$<$<COMPILE_LANGUAGE:C>:-flto=auto;-ffat-lto-objects>")
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "SHARED_LIBRARY" OR type STREQUAL "MODULE_LIBRARY")
      target_link_options(${t} PRIVATE -flto=auto)
    endif()
  endforeach()
endfunction()
