
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/l_core.c" "CMakeFiles/arbor_core.dir/src/l_core.c.o" "gcc" "CMakeFiles/arbor_core.dir/src/l_core.c.o.d"
  "/work/main/src/l_ctx.c" "CMakeFiles/arbor_core.dir/src/l_ctx.c.o" "gcc" "CMakeFiles/arbor_core.dir/src/l_ctx.c.o.d"
  "/work/main/src/l_engine.c" "CMakeFiles/arbor_core.dir/src/l_engine.c.o" "gcc" "CMakeFiles/arbor_core.dir/src/l_engine.c.o.d"
  "/work/main/src/processor.c" "CMakeFiles/arbor_core.dir/src/processor.c.o" "gcc" "CMakeFiles/arbor_core.dir/src/processor.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build/CMakeFiles/arbor_tree.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
