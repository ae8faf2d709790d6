# The manual pages (issue 13): doc/NAME.SECTION.scd, written in scdoc
# (Debian's scdoc; scripts/setup.sh installs it), built into BUILD/man/NAME.SECTION
# by the default target and installed to PREFIX/share/man/manSECTION/.
#
#   doc/oopsd.8.scd         oopsd(8)          the daemon: flags, environment, signals, endpoints
#   doc/oopsctl.1.scd       oopsctl(1)        every command, its flags, the exit codes
#   doc/oopsd.policy.5.scd  oopsd.policy(5)   every policy declaration and key, with defaults
#
# tests/integration/manuals.sh renders them with man -l and checks that every
# policy key, oopsctl command and oopsd flag is in them. Without scdoc the
# pages are skipped (with a message), not the build.
#
# The date in each page: $SOURCE_DATE_EPOCH when set (scdoc reads it), else
# the date of the commit checked out when cmake ran, else today's; so a
# rebuild of the same source writes the same pages.

find_program(SCDOC scdoc)
file(GLOB OOPS_MAN_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/doc/*.scd)

if(NOT SCDOC)
  message(STATUS "scdoc not found: the manual pages are not built (apt-get install scdoc)")
  return()
endif()

set(OOPS_MAN_DATE "$ENV{SOURCE_DATE_EPOCH}")
if(OOPS_MAN_DATE STREQUAL "")
  find_program(OOPS_MAN_GIT git)
  if(OOPS_MAN_GIT AND EXISTS "${CMAKE_SOURCE_DIR}/.git")
    execute_process(COMMAND ${OOPS_MAN_GIT} log -1 --format=%ct
                    WORKING_DIRECTORY "${CMAKE_SOURCE_DIR}"
                    OUTPUT_VARIABLE OOPS_MAN_DATE ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  endif()
endif()
set(OOPS_MAN_ENV)
if(OOPS_MAN_DATE MATCHES "^[0-9]+$")
  set(OOPS_MAN_ENV SOURCE_DATE_EPOCH=${OOPS_MAN_DATE})
endif()

include(GNUInstallDirs) # CMAKE_INSTALL_MANDIR: share/man
set(OOPS_MAN_DIR ${CMAKE_BINARY_DIR}/man)
set(OOPS_MAN_PAGES)
foreach(src IN LISTS OOPS_MAN_SOURCES)
  get_filename_component(page ${src} NAME_WLE) # oopsd.policy.5.scd -> oopsd.policy.5
  if(NOT page MATCHES "\\.([1-8])$")
    message(FATAL_ERROR "cmake/man.cmake: ${src}: a page is named NAME.SECTION.scd")
  endif()
  set(section ${CMAKE_MATCH_1})
  set(out ${OOPS_MAN_DIR}/${page})
  # scdoc reads stdin and writes stdout: through sh for the redirects, into a
  # temporary file renamed on success (a failed run leaves no page behind).
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${OOPS_MAN_DIR}
    COMMAND ${CMAKE_COMMAND} -E env ${OOPS_MAN_ENV}
            sh -c "\"$0\" < \"$1\" > \"$2.tmp\" && mv \"$2.tmp\" \"$2\"" ${SCDOC} ${src} ${out}
    DEPENDS ${src}
    COMMENT "scdoc ${page}"
    VERBATIM)
  list(APPEND OOPS_MAN_PAGES ${out})
  install(FILES ${out} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
endforeach()

add_custom_target(man ALL DEPENDS ${OOPS_MAN_PAGES})
