file(REMOVE_RECURSE
  "libarbor_core.a"
)
