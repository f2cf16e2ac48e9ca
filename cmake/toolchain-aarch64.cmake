# Cross build for aarch64 (arm64) on a Debian amd64 host with Debian's
# multiarch arm64 packages (scripts/test-arm64.sh installs them; docs/arm64.md):
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake
# Compiler: gcc-aarch64-linux-gnu (aarch64-linux-gnu-gcc). Libraries and .pc
# files: the :arm64 -dev packages in /usr/lib/aarch64-linux-gnu. Tests run
# under qemu-user (qemu-aarch64) through CMAKE_CROSSCOMPILING_EMULATOR: ctest
# prefixes every test whose command is a target of this build with it.
# Two-process loopback tests also need the process_vm_* shim that
# scripts/test-arm64.sh preloads (QEMU_SET_ENV; docs/arm64.md).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(TE_CROSS_TRIPLE aarch64-linux-gnu CACHE STRING "cross toolchain triple")
set(CMAKE_C_COMPILER ${TE_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${TE_CROSS_TRIPLE}-g++)

# The arm64 loader and libraries are installed by multiarch under /lib and
# /usr/lib/aarch64-linux-gnu, where qemu-aarch64 finds them without -L.
# TE_QEMU_SYSROOT (e.g. an extracted sysroot, docs/arm64.md) adds -L DIR.
set(TE_QEMU_SYSROOT "" CACHE PATH "qemu-aarch64 -L prefix (empty: the host's multiarch /)")
find_program(TE_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(TE_QEMU_AARCH64)
  if(TE_QEMU_SYSROOT)
    set(CMAKE_CROSSCOMPILING_EMULATOR ${TE_QEMU_AARCH64} -L ${TE_QEMU_SYSROOT})
  else()
    set(CMAKE_CROSSCOMPILING_EMULATOR ${TE_QEMU_AARCH64})
  endif()
endif()

# pkg-config sees only the arm64 .pc files (and the arch-independent ones).
set(ENV{PKG_CONFIG_LIBDIR}
    "/usr/lib/${TE_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Headers and libraries from the target's multiarch directories; programs
# (python3, qemu) from the host.
set(CMAKE_LIBRARY_ARCHITECTURE ${TE_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
