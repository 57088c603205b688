-- The Lua module arbor (lua/arbor/*.lua and the C module arbor.core) for
-- LuaRocks, built by CMake against Debian's lua5.4 headers. From the
-- repository's root:
--   luarocks --lua-version 5.4 make dist/arbor-0.1.0-1.rockspec
-- luv, libuv and lua-cjson come from Debian (lua-luv-dev, libuv1-dev,
-- lua-cjson: scripts/setup run), not from LuaRocks.
rockspec_format = "3.0"
package = "arbor"
version = "0.1.0-1"
source = {url = "git+file://."} -- built where it is (luarocks make)
description = {
  summary = "A supervision engine: a supervision tree in C, runnables and restart policies in Lua 5.4",
  detailed = [[
arbor runs a supervision tree of Lua runnables and operating-system processes
on one libuv event loop; restart policies are plain Lua functions, and trees
are tested on a virtual clock (arbor.testing).]],
}
dependencies = {"lua >= 5.4, < 5.5"}
build = {
  type = "command",
  build_command = [[cmake -S . -B build-rock -DCMAKE_BUILD_TYPE=Release ]]
    .. [[-DARBOR_LUA_DIR="$(LUADIR)" -DARBOR_CMOD_DIR="$(LIBDIR)" > /dev/null ]]
    .. [[&& cmake --build build-rock --target arbor_module]],
  install_command = [[cmake --install build-rock --component lua]],
}
