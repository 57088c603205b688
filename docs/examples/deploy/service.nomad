# A Nomad job running the tree with the exec driver, on clients with the
# arbor package installed and the script in /etc/arbor/service.lua (the
# exec driver's chroot has /etc and /usr):
#   nomad job run docs/examples/deploy/service.nomad
job "arbor-service" {
  datacenters = ["dc1"]
  type        = "service"

  group "service" {
    task "arbor" {
      driver = "exec"

      config {
        command = "/usr/bin/arbor"
        args    = ["run", "--init", "/etc/arbor/service.lua"]
      }

      # SIGTERM starts the ordered stop; SIGKILL comes after the tree's
      # stop bound (`arbor ctl status`: 25 s) and a margin
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      resources {
        cpu    = 200
        memory = 128
      }
    }
  }
}
