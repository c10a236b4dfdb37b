# Installing the runtime as a library (docs/library.md): `cmake --install build --prefix P` puts
# the public headers in P/include/pprt, the static libraries (libpprt, the compiler library libppc
# it uses, and their parts) in P/lib, ppcompile (which writes the plans a program runs) in P/bin,
# and a package config in P/lib/cmake/pprt, so that a program built elsewhere does
#     find_package(pprt CONFIG REQUIRED)            # with -DCMAKE_PREFIX_PATH=P (and its torch)
#     target_link_libraries(app PRIVATE pprt::pprt)
# The config finds LibTorch of the release this build used (cmake/torch.cmake) where the
# consumer says (Torch_DIR, PPRT_PYTHON, CMAKE_PREFIX_PATH, VIRTUAL_ENV: nothing of this machine is
# written into it), and the packages the libraries link (fmt, nlohmann_json, CLI11, the ANTLR
# runtime). Only these are installed.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(PPRT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/pprt)
install(TARGETS pprt pprt_io ppc pp_layout_grammar ppcompile
        EXPORT pprtTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime/include/pprt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT pprtTargets NAMESPACE pprt:: DESTINATION ${PPRT_CMAKE_DIR})

# What the config writes in: the release of this build's torch (PP_TORCH_VERSION, cmake/torch.cmake)
# and whether the NCCL transport is in (PPRT_NCCL, runtime/CMakeLists.txt, which includes this).
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/pprtConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/pprtConfig.cmake
                              INSTALL_DESTINATION ${PPRT_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/pprtConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pprtConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/pprtConfigVersion.cmake
        DESTINATION ${PPRT_CMAKE_DIR})
