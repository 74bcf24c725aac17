# troupe_plugin_cuda(<target> <sources>...): an in-tree plugin's CUDA sources, built where nvcc is found
# (TROUPE_CUDA_FOUND, set by the top-level CMakeLists) into an object library linked into the plugin, which then
# defines TROUPE_PLUGIN_CUDA for its own sources and links cudart. Without nvcc this does nothing and the plugin stays
# CPU only. Architectures: TROUPE_CUDA_ARCHS (sm_90 SASS plus compute_80 PTX by default).
include_guard(GLOBAL)

function(troupe_plugin_cuda target)
    if(NOT TROUPE_CUDA_FOUND)
        return()
    endif()
    set(objects ${target}_cuda)
    add_library(${objects} OBJECT ${ARGN})
    # The directory's -Wall -Wextra are g++ flags nvcc does not take: drop them, pass them to the host compiler.
    set_property(TARGET ${objects} PROPERTY COMPILE_OPTIONS "")
    target_compile_options(${objects} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
    set_target_properties(${objects} PROPERTIES
        CUDA_ARCHITECTURES "${TROUPE_CUDA_ARCHS}"
        CUDA_STANDARD 17
        CUDA_STANDARD_REQUIRED ON
        POSITION_INDEPENDENT_CODE ON
        CUDA_VISIBILITY_PRESET hidden
        CXX_VISIBILITY_PRESET hidden
        VISIBILITY_INLINES_HIDDEN ON)
    target_link_libraries(${objects} PRIVATE troupe::sdk CUDA::cudart)
    # One runtime in the process, the shared one the CUDA backend uses too (CMake's default would add cudart_static).
    set_target_properties(${objects} ${target} PROPERTIES CUDA_RUNTIME_LIBRARY Shared)
    target_link_libraries(${target} PRIVATE ${objects} CUDA::cudart)
    target_compile_definitions(${target} PRIVATE TROUPE_PLUGIN_CUDA=1)
endfunction()
