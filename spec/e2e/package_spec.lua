-- End-to-end: the Debian package. scripts/package builds it; apt-get
-- installs it; the example of docs/deploy.md runs from the installed paths
-- only (as PID 1 of its own PID namespace, as in a container, with `arbor
-- ctl status --ready` as its probe); apt-get purge removes every file.
-- Installing needs root (CI runs as root, with Debian's archive): as
-- another user the spec is pending, as it is with ARBOR_BUILD_SPECS=no
-- (scripts/test's sanitizer and valgrind stages: the package does not
-- depend on $ARBOR_BIN). It leaves the machine as it found it:
-- the package is purged whatever happens, and the specs that follow use
-- $ARBOR_BIN and the build tree's module, never /usr/bin/arbor.
local support = require "e2e.support"
local q, read, mktemp = support.q, support.read, support.mktemp

-- Everything here runs the package's programs and Debian's tools, without
-- the sanitizer runtime scripts/test preloads for lua5.4.
local function sh(cmd) return support.sh("unset LD_PRELOAD; " .. cmd) end

local is_root = support.capture("id -u"):match("^0%s*$") ~= nil
local installed = os.execute(
  "dpkg-query -W -f='${Status}' arbor 2>/dev/null | grep -q 'install ok installed'") == true

local function poll(fn, what)
  if not support.eventually(fn) then error("timed out waiting for " .. what, 2) end
end

local function ok(cmd)
  local code, out = sh(cmd)
  assert(code == 0, cmd .. " exited " .. tostring(code) .. ":\n" .. out)
  return out
end

-- Runs cmd with only the installed arbor to find: an empty environment
-- but PATH, in dir.
local function installed_only(dir, cmd)
  return string.format("cd %s && env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin sh -c %s",
    q(dir), q(cmd))
end

describe("the Debian package", function()
  local skip = not is_root and "needs root to install a .deb with apt-get (CI runs as root)"
    or installed and "package arbor is installed on this machine already: not replacing it"
    or os.getenv("ARBOR_BUILD_SPECS") == "no"
      and "ARBOR_BUILD_SPECS=no: scripts/test builds the package in its first busted stage only"
  if skip then
    it("is built, installed with apt-get, run and purged", function() pending(skip) end)
    return
  end

  local deb, dir, files
  setup(function()
    dir = mktemp()
    deb = ok("scripts/package 2>&1"):match("(/%S+/arbor_[^/%s]+%.deb)%s*$")
  end)
  teardown(function()
    sh("DEBIAN_FRONTEND=noninteractive apt-get purge -y -q arbor")
    os.execute("rm -rf " .. q(dir))
  end)

  it("is arbor_<version>_<arch>.deb and depends on what arbor links and loads", function()
    local version = ok(support.bin .. " --version"):match("^arbor (%S+)")
    local arch = ok("dpkg --print-architecture"):match("%S+")
    assert.matches("/arbor_" .. version:gsub("%.", "%%.") .. "_" .. arch .. "%.deb$", deb)
    local depends = ok("dpkg-deb -f " .. q(deb) .. " Depends")
    for _, p in ipairs{"lua5.4", "liblua5.4-0", "libuv1", "lua-luv", "lua-cjson",
      "libreadline8", "libc6"} do
      assert.matches("%f[%w]" .. p:gsub("%-", "%%-"):gsub("%.", "%%.") .. "%f[^%w.-]",
        depends, nil, false)
    end
    -- the package of every library the binary names (NEEDED) is a dependency
    local dir_x = dir .. "/x"
    ok("dpkg-deb -x " .. q(deb) .. " " .. q(dir_x))
    local exe = q(dir_x .. "/usr/bin/arbor")
    local where = {}
    for name, path in ok("ldd " .. exe):gmatch("(%S+) => (/%S+)") do where[name] = path end
    for name in ok("readelf -d " .. exe):gmatch("%(NEEDED%)[^%[]*%[([^%]]+)%]") do
      assert.is_truthy(where[name], name)
      local real = ok("realpath " .. q(where[name])):gsub("%s+$", "")
      local owner = ok("dpkg -S " .. q(real) .. " 2>/dev/null || dpkg -S "
        .. q((real:gsub("^/usr/lib/", "/lib/")))):match("^([^:]+)")
      assert.is_truthy(depends:find(owner, 1, true),
        name .. " (" .. owner .. ") is not in Depends: " .. depends)
    end
  end)

  it("installs with apt-get where Debian looks for each file", function()
    ok("DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
      .. q(deb) .. " 2>&1")
    files = {}
    for f in ok("dpkg -L arbor"):gmatch("[^\n]+") do
      if os.execute("test -f " .. q(f)) then files[#files + 1] = f end
    end
    local want = {"/usr/bin/arbor", "/usr/share/lua/5.4/arbor/init.lua",
      "/usr/share/man/man1/arbor-run.1.gz", "/usr/share/bash-completion/completions/arbor",
      "/usr/lib/systemd/system/arbor@.service", "/usr/share/doc/arbor/deploy.md",
      "/usr/share/doc/arbor/examples/service.lua"}
    for _, f in ipairs(want) do assert.is_truthy(read(f), f) end
    assert.matches("/usr/lib/[^\n]*/lua/5%.4/arbor/core%.so\n", table.concat(files, "\n") .. "\n")
  end)

  it("lua5.4 finds the module in Debian's own directories", function()
    -- Debian's search path without /usr/local and ./, where another
    -- install could shadow the package's files
    local function system_only(p)
      local keep = {}
      for e in p:gmatch("[^;]+") do
        if e:find("^/usr/") and not e:find("^/usr/local/") then keep[#keep + 1] = e end
      end
      return table.concat(keep, ";")
    end
    local path = system_only(ok([[lua5.4 -e 'io.write(package.path)']]))
    local cpath = system_only(ok([[lua5.4 -e 'io.write(package.cpath)']]))
    local out = ok(installed_only(dir, string.format("LUA_PATH=%s LUA_CPATH=%s lua5.4 -e %s",
      q(path), q(cpath), q([[local a = require "arbor"
        print(package.searchpath("arbor", package.path))
        print(a.run(function(ctx) ctx:signal("healthy") a.stop() ctx:wait() end))]]))))
    assert.equal("/usr/share/lua/5.4/arbor/init.lua\ntrue\tnil\n", out)
  end)

  it("runs the deployment example as PID 1, ready for an exec probe, and stops it on SIGTERM", function()
    local work = dir .. "/run"
    ok("mkdir -p " .. q(work) .. " && cp /usr/share/doc/arbor/examples/service.lua " .. q(work))
    local sock = work .. "/ctl.sock"
    local unshare = os.execute("unshare --pid --fork --mount-proc true 2>/dev/null") == true
    local sh_pid = support.capture("unset LD_PRELOAD; " .. installed_only(work, string.format(
      "(%s /usr/bin/arbor run --init --control %s service.lua > out 2>&1; echo $? > rc) "
      .. "> /dev/null 2>&1 & echo $!", unshare and "unshare --pid --fork --mount-proc" or "",
      q(sock)))):match("%d+")
    local probe = "/usr/bin/arbor ctl " .. q(sock) .. " status --ready"
    poll(function() return sh(probe) == 0 end, "the readiness probe")
    local status = ok("/usr/bin/arbor ctl " .. q(sock) .. " status --json")
    assert.matches('"stop_bound":25', status, 1, true)
    assert.matches('"script":"service.lua"', status, 1, true)
    if unshare then assert.matches('"pid":1[,}]', status) end
    -- SIGTERM to arbor, as docker stop or the kubelet send it
    local pid = sh_pid
    for _ = 1, unshare and 2 or 1 do
      pid = read("/proc/" .. pid .. "/task/" .. pid .. "/children"):match("%d+")
    end
    os.execute("kill -TERM " .. pid)
    poll(function() return read(work .. "/rc") end, "arbor to exit")
    local out = read(work .. "/out")
    assert.equal("0\n", read(work .. "/rc"), out)
    assert.matches("root%.app +| stdout: app: stopping", out)
    assert.matches("root +HEALTHY %-> CANCELED", out)
  end)

  it("has man pages man finds, a completion bash loads and a unit systemd-analyze accepts", function()
    local out = ok("MANWIDTH=80 man arbor-ctl 2>&1 | cat")
    assert.matches("arbor%-ctl %- control a running arbor tree", out)
    out = ok([[bash -c 'source /usr/share/bash-completion/completions/arbor && ]]
      .. [[COMP_WORDS=(arbor r) COMP_CWORD=1 && _arbor; printf "%s\n" "${COMPREPLY[@]}"']])
    assert.matches("^run\nrepl\n$", out)
    if os.execute("command -v systemd-analyze > /dev/null") then
      assert.equal("", ok("systemd-analyze verify arbor@web.service 2>&1"))
    end
    local unit = read("/usr/lib/systemd/system/arbor@.service")
    assert.matches("\nExecStart=/usr/bin/arbor run /etc/arbor/%i.lua\n", unit, 1, true)
    assert.matches("\nType=notify\n", unit, 1, true)
    assert.matches("\nKillMode=mixed\n", unit, 1, true)
  end)

  it("is purged with every file it installed", function()
    assert.is_truthy(files and #files > 0, "installed first")
    ok("DEBIAN_FRONTEND=noninteractive apt-get purge -y -q arbor 2>&1")
    assert.is_false(os.execute(
      "dpkg-query -W -f='${Status}' arbor 2>/dev/null | grep -q 'install ok installed'") == true)
    for _, f in ipairs(files) do
      assert.is_nil(read(f), f .. " is left")
    end
    assert.is_false(os.execute("test -e /usr/share/lua/5.4/arbor") == true)
  end)
end)
