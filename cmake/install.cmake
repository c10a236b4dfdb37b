# Installing the runtime as a library (docs/library.md): `cmake --install build --prefix P` puts
# the public headers in P/include/pprt, the static libraries (libpprt, the compiler library libppc
# it uses, and their parts) in P/lib, and a package config in P/lib/cmake/pprt, so that a program
# built elsewhere does
#     find_package(pprt CONFIG REQUIRED)            # with -DCMAKE_PREFIX_PATH=P
#     target_link_libraries(app PRIVATE pprt::pprt)
# The config finds the LibTorch this build used (cmake/torch.cmake) and the packages the libraries
# link (fmt, nlohmann_json, CLI11, the ANTLR runtime). Only these are installed.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(PPRT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/pprt)
install(TARGETS pprt pprt_io ppc pp_layout_grammar
        EXPORT pprtTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime/include/pprt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT pprtTargets NAMESPACE pprt:: DESTINATION ${PPRT_CMAKE_DIR})

# What the config writes in: the torch of this build.
# (included by runtime/CMakeLists.txt, which sets PPRT_NCCL).
get_filename_component(PP_TORCH_PREFIX ${Torch_DIR}/.. ABSOLUTE)  # torch/share/cmake
get_filename_component(PP_TORCH_ROOT ${PP_TORCH_PREFIX}/../.. ABSOLUTE)  # torch/
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/pprtConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/pprtConfig.cmake
                              INSTALL_DESTINATION ${PPRT_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/pprtConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pprtConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/pprtConfigVersion.cmake
        DESTINATION ${PPRT_CMAKE_DIR})
