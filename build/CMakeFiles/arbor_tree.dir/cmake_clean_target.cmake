file(REMOVE_RECURSE
  "libarbor_tree.a"
)
