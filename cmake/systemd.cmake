# systemd (issue 13): the notify protocol and the watchdog from libsystemd
# (sd_notify, sd_watchdog_enabled: src/daemon.c), the unit file
# (contrib/systemd/oopsd.service) and the test's datagram receiver
# (tests/tools/notify_sink.c, tests/integration/systemd.sh).
# Without NOTIFY_SOCKET in its environment, oopsd sends nothing.
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)
target_link_libraries(oops_runtime PUBLIC PkgConfig::SYSTEMD)
target_compile_definitions(oops_runtime PRIVATE OOPS_HAVE_SYSTEMD=1)

# A unix datagram receiver standing in for systemd's notify socket.
add_executable(notify_sink tests/tools/notify_sink.c)

# The unit goes where systemd looks for a package's units: /usr/lib/systemd/system
# under /usr (Debian: lib/systemd/system of the package root), else PREFIX/lib/systemd/system.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(OOPS_SYSTEMD_UNIT_DIR /lib/systemd/system)
else()
  set(OOPS_SYSTEMD_UNIT_DIR lib/systemd/system)
endif()
install(FILES contrib/systemd/oopsd.service DESTINATION ${OOPS_SYSTEMD_UNIT_DIR})
# The unit's EnvironmentFile (OOPS_DB without a password, flags): /etc/default/oopsd
# under /usr (GNUInstallDirs puts SYSCONFDIR at /etc there), else PREFIX/etc/default.
include(GNUInstallDirs)
install(FILES contrib/systemd/oopsd.default DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/default
        RENAME oopsd)
