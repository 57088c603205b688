-- scripts/layers (issue 14): the file-level call graph read from object
-- files with nm. Each case compiles tiny C files with gcc into a fake build
-- directory laid out like CMake's (CMakeFiles/TARGET.dir/SOURCE.o).

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"exit:$?\"")
  local out = p:read("a")
  p:close()
  return out:gsub("exit:(%d+)%s*$", ""), tonumber(out:match("exit:(%d+)%s*$"))
end

describe("scripts/layers", function()
  local dir
  before_each(function() dir = (sh("mktemp -d"):gsub("%s+$", "")) end)
  after_each(function() sh("rm -rf '" .. dir .. "'") end)

  -- Compiles the C text as source path src into target's objects.
  local function object(target, src, text)
    local c = dir .. "/" .. src
    local o = dir .. "/CMakeFiles/" .. target .. ".dir/" .. src .. ".o"
    sh("mkdir -p $(dirname '" .. c .. "') $(dirname '" .. o .. "')")
    local f = assert(io.open(c, "w"))
    f:write(text)
    f:close()
    local out, code = sh("gcc -c -o '" .. o .. "' '" .. c .. "'")
    assert(code == 0, out)
  end

  local function layers(opts)
    return sh("lua5.4 scripts/layers '" .. dir .. "'" .. (opts or ""))
  end

  it("reports a lower layer calling a higher one, with the symbol", function()
    object("lib", "src/core/a.c", "int b(void); int a(void) { return b(); }")
    object("lib", "src/engine/b.c", "int b(void) { return 1; }")
    object("lib", "src/control/c.c", "int b(void); int c(void) { return b(); }")
    local out, code = layers()
    assert.equal(1, code)
    assert.matches("layer violation: src/core/a.c (core) -> src/engine/b.c (engine) via b",
      out, 1, true)
    assert.matches("layer violation: src/control/c.c (control) -> src/engine/b.c (engine) via b",
      out, 1, true)
    assert.no.matches("cycle of", out, 1, true)
    assert.matches("layers: 3 files, 2 edges, 0 cycles, 2 layer violations", out, 1, true)
  end)

  it("reports each cycle with its files and an example symbol per edge", function()
    object("lib", "src/engine/a.c", "int b1(void); int a(void) { return b1(); }")
    object("lib", "src/engine/b.c",
      "int c(void); int b1(void) { return c(); } int b2(void) { return c(); }")
    object("lib", "src/engine/c.c", "int a(void); int c(void) { return a(); }")
    object("lib", "src/d.c", "int e(void); int d(void) { return e(); }")
    object("lib", "src/e.c", "int d(void); int e(void) { return d(); }")
    object("lib", "src/f.c", "int a(void); int f(void) { return a(); }")
    local out, code = layers()
    assert.equal(1, code)
    assert.matches("cycle of 3 files: src/engine/a.c src/engine/b.c src/engine/c.c\n" ..
      "  src/engine/a.c -> src/engine/b.c (b1)\n" ..
      "  src/engine/b.c -> src/engine/c.c (c)\n" ..
      "  src/engine/c.c -> src/engine/a.c (a)\n", out, 1, true)
    assert.matches("cycle of 2 files: src/d.c src/e.c\n" ..
      "  src/d.c -> src/e.c (e)\n  src/e.c -> src/d.c (d)\n", out, 1, true)
    assert.no.matches("src/f.c ->", out, 1, true)
    assert.matches("layers: 6 files, 6 edges, 2 cycles, 0 layer violations", out, 1, true)
  end)

  it("leaves out objects whose source is gone from a CMake build's tree", function()
    object("lib", "src/engine/a.c", "int b(void); int a(void) { return b(); }")
    object("lib", "src/engine/b.c", "int a(void); int b(void) { return a(); }")
    local f = assert(io.open(dir .. "/CMakeCache.txt", "w"))
    f:write("CMAKE_HOME_DIRECTORY:INTERNAL=" .. dir .. "\n")
    f:close()
    os.remove(dir .. "/src/engine/b.c")
    local out, code = layers()
    assert.equal(0, code, out)
    assert.equal("layers: 1 files, 0 edges, 0 cycles, 0 layer violations\n", out)
  end)

  it("passes a clean graph: downward calls, flat files, outside symbols", function()
    local a = "int a(void) { return 1; }"
    object("lib", "src/core/a.c", a)
    object("module", "src/core/a.c", a) -- the same source in two targets
    object("lib", "src/engine/b.c",
      "#include <stdio.h>\nint a(void); int b(void) { return printf(\"%d\", a()); }")
    object("lib", "src/lua/l.c", "int b(void); int u(void); int l(void) { return b() + u(); }")
    object("lib", "src/u.c", "int b(void); int u(void) { return b(); }")
    object("test_a", "spec/c/test_a.c", "int l(void); int main(void) { return l(); }")
    local out, code = layers()
    assert.equal(0, code, out)
    assert.equal("layers: 4 files, 4 edges, 0 cycles, 0 layer violations\n", out)
  end)

  it("fails when there is no object file of src/ to read", function()
    object("test_a", "spec/c/test_a.c", "int main(void) { return 0; }")
    local out, code = layers()
    assert.equal(2, code)
    assert.matches("no object files of src/ under " .. dir .. "/CMakeFiles", out, 1, true)
  end)
end)
