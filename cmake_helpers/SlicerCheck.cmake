# CMake glue for projects that build with CMake: adds a `check-slicer` target
# running Slicer's lit suite with the tools of the installed Python packages.
#
#   include(path/to/cmake_helpers/SlicerCheck.cmake)
#   slicer_add_check_target(SOURCE_DIR path/to/slicer [PYTHON /path/to/python])
#
# The Python interpreter must have slicer installed (`pip install -e '.[test]'`);
# mlir-opt and FileCheck are found by lit.cfg.py from that install.
function(slicer_add_check_target)
  cmake_parse_arguments(ARG "" "SOURCE_DIR;PYTHON" "" ${ARGN})
  if(NOT ARG_SOURCE_DIR)
    message(FATAL_ERROR "slicer_add_check_target: SOURCE_DIR is required")
  endif()
  if(NOT ARG_PYTHON)
    find_package(Python3 3.11 REQUIRED COMPONENTS Interpreter)
    set(ARG_PYTHON "${Python3_EXECUTABLE}")
  endif()
  # The `lit` console script installed beside that interpreter (the test extra).
  get_filename_component(python_bin_dir "${ARG_PYTHON}" DIRECTORY)
  find_program(SLICER_LIT lit HINTS "${python_bin_dir}" NO_DEFAULT_PATH)
  find_program(SLICER_LIT lit REQUIRED)
  add_custom_target(check-slicer
    COMMAND "${SLICER_LIT}" -sv "-Dpython=${ARG_PYTHON}" "${ARG_SOURCE_DIR}/test"
    WORKING_DIRECTORY "${ARG_SOURCE_DIR}"
    COMMENT "Running Slicer's lit tests"
    USES_TERMINAL)
endfunction()
