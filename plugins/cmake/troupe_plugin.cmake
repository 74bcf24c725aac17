# troupe_add_plugin(<kind> <name> <sources>...): builds a troupe plugin, the same way in troupe's tree and in an
# out-of-tree project (find_package(troupe) includes this file from the installed CMake package).
#
# Makes MODULE library target troupe_<kind>_<name>, file libtroupe_<kind>_<name>.so, linked to troupe::sdk (the SDK
# headers), with hidden visibility, a version script that exports only the entry point troupe_plugin_query
# (hidden visibility alone still exports weak instantiations of std templates: libstdc++ declares namespace std
# with default visibility), --exclude-libs so static libraries linked in stay hidden, and --no-undefined so a
# missing symbol fails the link rather than the host's dlopen.
#
# The library goes to ${TROUPE_PLUGIN_OUTPUT_DIR}/<kind>/ when that is set (troupe's tree: its plugin folder, where
# the host finds plugins by kind and name), else to the project's binary folder/<kind>/. Where a custom target
# troupe_plugins exists (troupe's tree), the plugin joins it.
include_guard(GLOBAL)

set(TROUPE_PLUGIN_VERSION_SCRIPT ${CMAKE_BINARY_DIR}/troupe_plugin.map CACHE INTERNAL "troupe plugins export only this")
file(WRITE ${TROUPE_PLUGIN_VERSION_SCRIPT} "{\n  global: troupe_plugin_query;\n  local: *;\n};\n")

function(troupe_add_plugin kind name)
    if(NOT kind MATCHES "^(attention|quant|spec|kv)$")
        message(FATAL_ERROR "troupe_add_plugin: unknown kind '${kind}' (valid: attention, quant, spec, kv)")
    endif()
    if(NOT ARGN)
        message(FATAL_ERROR "troupe_add_plugin(${kind} ${name}): no sources")
    endif()
    set(output_dir ${CMAKE_BINARY_DIR})
    if(TROUPE_PLUGIN_OUTPUT_DIR)
        set(output_dir ${TROUPE_PLUGIN_OUTPUT_DIR})
    endif()
    set(target troupe_${kind}_${name})
    add_library(${target} MODULE ${ARGN})
    target_link_libraries(${target} PRIVATE troupe::sdk)
    set_target_properties(${target} PROPERTIES
        PREFIX "lib"
        OUTPUT_NAME troupe_${kind}_${name}
        LIBRARY_OUTPUT_DIRECTORY ${output_dir}/${kind}
        C_VISIBILITY_PRESET hidden
        CXX_VISIBILITY_PRESET hidden
        VISIBILITY_INLINES_HIDDEN ON)
    target_link_options(${target} PRIVATE -Wl,--exclude-libs,ALL -Wl,--no-undefined
                        -Wl,--version-script=${TROUPE_PLUGIN_VERSION_SCRIPT})
    set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${TROUPE_PLUGIN_VERSION_SCRIPT})
    if(TARGET troupe_plugins)
        add_dependencies(troupe_plugins ${target})
    endif()
endfunction()
