/* te-bench's GPU tests (test_gpu.c): their own small command line. */
#ifndef TB_TEST_GPU_H
#define TB_TEST_GPU_H

struct tb_gpu_opts {
    int iters;     /* samples (per size); 0 = the test's default */
    int src_cuda;  /* cudawrite: source in device memory */
    int dst_cuda;  /* cudawrite: destination in device memory */
};

/** Whether --test NAME is one of the GPU tests (cudawrite, watcher, gpuflag). */
int tb_gpu_is_test(const char *name);

/** Run the GPU test named on the command line; exit status (77 = skipped). */
int tb_gpu_main(int argc, char **argv);

#endif
