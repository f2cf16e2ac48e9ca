# Tests of GPU memory support (docs/cuda.md). Included by tests/CMakeLists.txt.
#  - cuda_no_driver_*: CUDA unusable (no driver library, the toolkit's stub
#    driver, or a build without CUDA): every entry point names the cause.
#    Run on every host.
#  - cuda_gpu_*: label gpu; they need a CUDA device and exit 77 (skipped)
#    with the reason where there is none (scripts/gpu-check.sh runs them on
#    a GPU machine).
set(TE_CUDA_TEST_ENV "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}" "CK_DEFAULT_TIMEOUT=60")

add_executable(cuda_no_driver ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_no_driver.c)
target_link_libraries(cuda_no_driver PRIVATE transferengine PkgConfig::CHECK)
if(TARGET te-plugin-loopback)
  add_dependencies(cuda_no_driver te-plugin-loopback)
endif()

if(TE_CUDA_ENABLED)
  # No such library: the dlopen failure is the reason.
  add_test(NAME cuda_no_driver_missing COMMAND cuda_no_driver)
  set_tests_properties(cuda_no_driver_missing PROPERTIES LABELS cuda TIMEOUT 60
    ENVIRONMENT "${TE_CUDA_TEST_ENV};TE_CUDA_DRIVER=/nonexistent/libcuda.so.1;TE_TEST_EXPECT=needs /nonexistent/libcuda.so.1: not found")
  # The toolkit's stub: loads, then cuInit answers CUDA_ERROR_STUB_LIBRARY.
  set(TE_CUDA_STUB "${CUDAToolkit_LIBRARY_DIR}/stubs/libcuda.so")
  if(EXISTS "${TE_CUDA_STUB}")
    add_test(NAME cuda_no_driver_stub COMMAND cuda_no_driver)
    set_tests_properties(cuda_no_driver_stub PROPERTIES LABELS cuda TIMEOUT 60
      ENVIRONMENT "${TE_CUDA_TEST_ENV};TE_CUDA_DRIVER=${TE_CUDA_STUB};TE_TEST_EXPECT=CUDA_ERROR_STUB_LIBRARY")
  endif()
else()
  add_test(NAME cuda_no_driver_nocuda_build COMMAND cuda_no_driver)
  set_tests_properties(cuda_no_driver_nocuda_build PROPERTIES LABELS cuda TIMEOUT 60
    ENVIRONMENT "${TE_CUDA_TEST_ENV};TE_TEST_EXPECT=this build has no CUDA support")
endif()

if(TE_CUDA_KERNELS)
  add_executable(cuda_gpu ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_gpu.c
                          ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_gpu_flag.c)
  target_link_libraries(cuda_gpu PRIVATE transferengine te_cuda_kernels
                                         PkgConfig::CHECK)
  if(TARGET te-plugin-loopback)
    add_dependencies(cuda_gpu te-plugin-loopback)
  endif()
  # One ctest per Check test case, so a skip or failure is reported by name.
  foreach(tc pointer registration loopback flag watcher)
    add_test(NAME cuda_gpu_${tc} COMMAND cuda_gpu ${tc})
    set_tests_properties(cuda_gpu_${tc} PROPERTIES LABELS "gpu;cuda"
      TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT "${TE_CUDA_TEST_ENV}")
  endforeach()
endif()

# The whole conformance suite with device memory (loopback): both sides,
# device sources only, device destinations only; in this process and with
# remotes in child processes (device regions of the remotes are staged
# through host memory there; see docs/cuda.md).
if(TARGET te-conformance AND TARGET te-plugin-loopback)
  function(te_cuda_conformance name)
    add_test(NAME cuda_conformance_${name}
             COMMAND te-conformance --plugin loopback ${ARGN})
    set_tests_properties(cuda_conformance_${name} PROPERTIES
      LABELS "gpu;cuda;conformance" TIMEOUT 300 SKIP_RETURN_CODE 77
      ENVIRONMENT "TE_PLUGIN_PATH=${TE_PLUGIN_BUILD_DIR}"
      PASS_REGULAR_EXPRESSION " 0 failed" FAIL_REGULAR_EXPRESSION "FAIL ")
  endfunction()
  te_cuda_conformance(lb_cuda_inproc --mem cuda)
  te_cuda_conformance(lb_cuda_src_inproc --mem-src cuda)
  te_cuda_conformance(lb_cuda_dst_2nic_inproc --mem-dst cuda
    --set engine.nics_per_group=2 --set loopback.devices=2)
  te_cuda_conformance(lb_cuda_dst_twoproc --two-process --mem-dst cuda)
endif()

# The loopback plugin's device-memory routing through the plugin ABI with a
# test host whose device copy is a memcpy (no GPU needed; see the file).
if(TARGET te-plugin-loopback)
  add_executable(cuda_lb_device_routing
    ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_lb_device_routing.c)
  target_sources(cuda_lb_device_routing PRIVATE
    ${CMAKE_CURRENT_SOURCE_DIR}/lib/fake_config.c)
  target_include_directories(cuda_lb_device_routing PRIVATE ${PROJECT_SOURCE_DIR}/include
    ${CMAKE_CURRENT_SOURCE_DIR}/lib)
  target_compile_definitions(cuda_lb_device_routing PRIVATE
    TE_PLUGIN_BUILD_DIR="${TE_PLUGIN_BUILD_DIR}")
  target_link_libraries(cuda_lb_device_routing PRIVATE te_core ${CMAKE_DL_LIBS})
  add_dependencies(cuda_lb_device_routing te-plugin-loopback)
  add_test(NAME cuda_lb_device_routing COMMAND cuda_lb_device_routing)
  set_tests_properties(cuda_lb_device_routing PROPERTIES LABELS cuda TIMEOUT 60)
endif()
