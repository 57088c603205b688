# install.cmake: what `cmake --install` puts where, and the Debian package
# that scripts/package builds from it (CPack's DEB generator). Included at
# the end of CMakeLists.txt, once the targets exist (docs/deploy.md).

# The Lua files and the arbor.core module go where Debian's lua5.4 looks
# under the prefix: share/lua/5.4 and lib/lua/5.4 for /usr/local,
# share/lua/5.4 and lib/<multiarch>/lua/5.4 for /usr. A LuaRocks build
# (dist/arbor-*.rockspec) gives its own directories.
set(ARBOR_LUA_DIR "${CMAKE_INSTALL_DATADIR}/lua/5.4" CACHE STRING
    "where the Lua files go (relative to the prefix, or absolute)")
set(ARBOR_CMOD_DIR "${CMAKE_INSTALL_LIBDIR}/lua/5.4" CACHE STRING
    "where the arbor.core module goes (relative to the prefix, or absolute)")

# The binary finds the Lua files at the same place relative to itself, so
# `cmake --install build --prefix P` works for any P (src/main.c).
cmake_path(ABSOLUTE_PATH ARBOR_LUA_DIR BASE_DIRECTORY "${CMAKE_INSTALL_PREFIX}"
           OUTPUT_VARIABLE arbor_lua_full)
file(RELATIVE_PATH arbor_lua_rel "${CMAKE_INSTALL_FULL_BINDIR}" "${arbor_lua_full}")
target_compile_definitions(arbor PRIVATE ARBOR_RELATIVE_LUA_DIR="${arbor_lua_rel}")

install(TARGETS arbor RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(TARGETS arbor_module LIBRARY DESTINATION ${ARBOR_CMOD_DIR}/arbor COMPONENT lua)
install(DIRECTORY lua/arbor DESTINATION ${ARBOR_LUA_DIR} COMPONENT lua)

# Man pages, compressed as Debian's policy wants them.
foreach(page arbor arbor-run arbor-ctl arbor-repl)
  set(gz ${CMAKE_BINARY_DIR}/man/${page}.1.gz)
  add_custom_command(OUTPUT ${gz}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
    COMMAND sh -c "gzip -9n < '${CMAKE_SOURCE_DIR}/docs/man/${page}.1' > '${gz}'"
    DEPENDS docs/man/${page}.1 VERBATIM)
  list(APPEND arbor_man_pages ${gz})
endforeach()
add_custom_target(arbor_man ALL DEPENDS ${arbor_man_pages})
install(FILES ${arbor_man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
        COMPONENT runtime)

install(FILES dist/arbor.bash-completion RENAME arbor
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        COMPONENT runtime)

# arbor@NAME.service runs /etc/arbor/NAME.lua with BINDIR/arbor; systemd
# also reads units from /usr/local/lib/systemd/system.
configure_file(dist/arbor@.service.in ${CMAKE_BINARY_DIR}/arbor@.service @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/arbor@.service DESTINATION lib/systemd/system
        COMPONENT runtime)

install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime
        PATTERN man EXCLUDE)

# ---- the Debian package (scripts/package) ----------------------------------
set(ARBOR_DEB_MAINTAINER "arbor developers <root@localhost>" CACHE STRING
    "the Maintainer field of the .deb")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME arbor)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "supervision engine: a supervision tree in C, runnables and policies in Lua 5.4")
set(CPACK_PACKAGE_DESCRIPTION
    "arbor runs a supervision tree of Lua runnables and operating-system\n\
processes on one libuv event loop; restart policies are plain Lua functions\n\
and trees are tested on a virtual clock. It runs as a systemd service\n\
(arbor@NAME, Type=notify), a container entrypoint or a scheduler's task.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # arbor_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${ARBOR_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
# the libraries linked (libc6, liblua5.4-0, libuv1, lua-luv, libreadline8)
# come from dpkg-shlibdeps; the Lua modules loaded at run time are named
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "lua5.4, lua-cjson")
set(CPACK_STRIP_FILES ON)
include(CPack)
