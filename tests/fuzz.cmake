# Fuzz targets (tests/fuzz/fuzz_<target>.c) and their stored corpora
# (tests/fuzz/corpus/<target>/). Included by tests/CMakeLists.txt.
#
# TE_BUILD_FUZZERS=OFF (default, any compiler): every target is linked with a
#   plain driver (tests/fuzz/replay_main.c) and ctest fuzz_replay_<target>
#   runs it once over every file of its corpus, so CI checks the corpora (and
#   under the asan/tsan presets, checks them with sanitizers).
# TE_BUILD_FUZZERS=ON (clang only; preset "fuzz"): the targets are libFuzzer
#   binaries build-fuzz/tests/fuzz_<target>, built with
#   -fsanitize=fuzzer,address,undefined; ctest fuzz_corpus_<target> replays
#   the corpus through libFuzzer (-runs=0). How to fuzz: docs/reliability.md.
option(TE_BUILD_FUZZERS "Build libFuzzer fuzz targets (requires clang)" OFF)

set(TE_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
set(TE_FUZZ_CORE_WIRE ${PROJECT_SOURCE_DIR}/core/wire.c ${PROJECT_SOURCE_DIR}/core/error.c)
set(TE_FUZZ_CORE_CONFIG ${PROJECT_SOURCE_DIR}/core/config.c
    ${PROJECT_SOURCE_DIR}/core/config_keys.c ${PROJECT_SOURCE_DIR}/core/error.c)
file(GLOB TE_FUZZ_LB_SOURCES ${PROJECT_SOURCE_DIR}/plugins/loopback/lb_*.c)
# The fake host's configuration (tests/lib/fake_config.h) over the core's
# store, compiled apart: the plugin's sources are built with -D_GNU_SOURCE,
# which the core's files define themselves.
add_library(te_fuzz_fake_config OBJECT ${TE_FUZZ_CORE_CONFIG}
  ${PROJECT_SOURCE_DIR}/core/plugin_config.c
  ${CMAKE_CURRENT_SOURCE_DIR}/lib/fake_config.c)
target_include_directories(te_fuzz_fake_config PRIVATE
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/core)
target_link_libraries(te_fuzz_fake_config PRIVATE PkgConfig::INIH)
if(TE_BUILD_FUZZERS)
  target_compile_options(te_fuzz_fake_config PRIVATE
    -fsanitize=address,undefined -fno-omit-frame-pointer -g)
endif()
file(GLOB TE_FUZZ_CORE_ALL CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/core/*.c)

# target -> what it links: core wire, core config, the loopback plugin's
# sources, or the whole core (engine: te_submit on a loopback engine)
set(TE_FUZZ_TARGETS
    desc_parse:wire
    wire_addr_decode:wire
    config_load_string:config
    lb_addr:loopback
    lb_hello:loopback
    lb_ring:loopback
    submit:engine
    efa_bye_parse:efa_wire)

if(TE_BUILD_FUZZERS AND NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "TE_BUILD_FUZZERS=ON needs clang (libFuzzer): configure "
          "with -DCMAKE_C_COMPILER=clang or use the preset \"fuzz\"")
endif()

set(TE_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g)

foreach(entry ${TE_FUZZ_TARGETS})
  string(REPLACE ":" ";" parts ${entry})
  list(GET parts 0 t)
  list(GET parts 1 kind)
  if(TE_BUILD_FUZZERS)
    set(exe fuzz_${t})
    add_executable(${exe} ${TE_FUZZ_DIR}/fuzz_${t}.c)
    target_compile_options(${exe} PRIVATE ${TE_FUZZ_FLAGS})
    target_link_options(${exe} PRIVATE ${TE_FUZZ_FLAGS})
  else()
    set(exe fuzz_replay_${t})
    add_executable(${exe} ${TE_FUZZ_DIR}/fuzz_${t}.c ${TE_FUZZ_DIR}/replay_main.c)
  endif()
  target_include_directories(${exe} PRIVATE ${TE_FUZZ_DIR}
    ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/core)
  if(kind STREQUAL "wire")
    target_sources(${exe} PRIVATE ${TE_FUZZ_CORE_WIRE})
  elseif(kind STREQUAL "efa_wire")
    # A pure parser of the efa plugin: no libfabric needed.
    target_sources(${exe} PRIVATE ${PROJECT_SOURCE_DIR}/plugins/efa/efa_bye_wire.c)
    target_include_directories(${exe} PRIVATE ${PROJECT_SOURCE_DIR}/plugins/efa)
  elseif(kind STREQUAL "config")
    target_sources(${exe} PRIVATE ${TE_FUZZ_CORE_CONFIG})
    target_link_libraries(${exe} PRIVATE PkgConfig::INIH m)
  elseif(kind STREQUAL "engine")
    # The whole core (instrumented when fuzzing); the loopback plugin is
    # loaded from the build tree like in every test.
    if(TE_BUILD_FUZZERS)
      target_sources(${exe} PRIVATE ${TE_FUZZ_CORE_ALL})
      target_link_libraries(${exe} PRIVATE PkgConfig::INIH Threads::Threads
                            ${CMAKE_DL_LIBS} m)
      target_compile_definitions(${exe} PRIVATE
        TE_PLUGIN_INSTALL_DIR="${TE_PLUGIN_INSTALL_DIR}"
        TE_PLUGIN_BUILD_DIR="${TE_PLUGIN_BUILD_DIR}")
    else()
      target_link_libraries(${exe} PRIVATE te_core)
    endif()
    target_compile_definitions(${exe} PRIVATE FUZZ_PLUGIN_DIR="${TE_PLUGIN_BUILD_DIR}")
    if(TARGET te-plugin-loopback)
      add_dependencies(${exe} te-plugin-loopback)
    endif()
  else()
    # The plugin is compiled into the target: coverage, and its internals
    # (lb_internal.h) for deterministic ids and invariant checks.
    # With the core's configuration store: the fake host serves the
    # plugin's typed keys as an engine does (tests/lib/fake_config.h).
    target_sources(${exe} PRIVATE ${TE_FUZZ_LB_SOURCES}
                   $<TARGET_OBJECTS:te_fuzz_fake_config>)
    target_include_directories(${exe} PRIVATE ${PROJECT_SOURCE_DIR}/plugins/loopback
                               ${CMAKE_CURRENT_SOURCE_DIR}/lib)
    target_compile_definitions(${exe} PRIVATE _GNU_SOURCE)
    target_link_libraries(${exe} PRIVATE te-plugin-common Threads::Threads
                          PkgConfig::INIH m)
  endif()
  target_compile_definitions(${exe} PRIVATE TE_VERSION_STRING="${PROJECT_VERSION}")

  # The corpus, plus reproducers of reported bugs (tests/fuzz/repro/<target>,
  # tolerated until fixed: see FUZZ_KNOWN in tests/fuzz/fuzz_check.h).
  set(corpus ${TE_FUZZ_DIR}/corpus/${t})
  if(EXISTS ${TE_FUZZ_DIR}/repro/${t})
    list(APPEND corpus ${TE_FUZZ_DIR}/repro/${t})
  endif()
  if(TE_BUILD_FUZZERS)
    add_test(NAME fuzz_corpus_${t} COMMAND ${exe} -runs=0 ${corpus})
  else()
    add_test(NAME fuzz_replay_${t} COMMAND ${exe} ${corpus})
  endif()
  if(TE_BUILD_FUZZERS)
    set_tests_properties(fuzz_corpus_${t} PROPERTIES LABELS fuzz TIMEOUT 300
      ENVIRONMENT "FUZZ_LB_QUIET=1")
  else()
    # 77: a fixed socket name was taken (no private network namespace).
    set_tests_properties(fuzz_replay_${t} PROPERTIES LABELS fuzz TIMEOUT 300
      ENVIRONMENT "FUZZ_LB_QUIET=1" SKIP_RETURN_CODE 77)
  endif()
endforeach()

# Seed generator (writes valid encodings into a directory per target); run
# by hand, see docs/reliability.md. Not a test.
add_executable(fuzz_gen_seeds EXCLUDE_FROM_ALL ${TE_FUZZ_DIR}/gen_seeds.c
               ${TE_FUZZ_CORE_WIRE} ${PROJECT_SOURCE_DIR}/plugins/loopback/lb_ring.c)
target_include_directories(fuzz_gen_seeds PRIVATE ${TE_FUZZ_DIR}
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/core
  ${PROJECT_SOURCE_DIR}/plugins/loopback)
target_link_libraries(fuzz_gen_seeds PRIVATE te-plugin-common)

# Race reproducers (a thread plays the hostile process); probabilistic, so
# not tests. Usage in tests/fuzz/race_lb.c and docs/reliability.md.
add_executable(fuzz_race_lb EXCLUDE_FROM_ALL ${TE_FUZZ_DIR}/race_lb.c ${TE_FUZZ_LB_SOURCES}
               $<TARGET_OBJECTS:te_fuzz_fake_config>)
target_include_directories(fuzz_race_lb PRIVATE ${TE_FUZZ_DIR}
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/plugins/loopback
  ${PROJECT_SOURCE_DIR}/core ${CMAKE_CURRENT_SOURCE_DIR}/lib)
target_compile_definitions(fuzz_race_lb PRIVATE _GNU_SOURCE)
target_link_libraries(fuzz_race_lb PRIVATE te-plugin-common Threads::Threads
                      PkgConfig::INIH m)
