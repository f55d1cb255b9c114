// Package realtest holds what real-kernel tests share: the decision to run,
// skip or fail when the live cgroup filesystem is not usable, and scratch
// cgroups that a test creates under a unique name and always removes.
//
// A real-kernel test calls Require first. On a laptop without root it skips;
// in CI, where CGWARDEN_REQUIRE_REAL=1, it fails instead, so a lane that
// silently ran nothing cannot pass.
package realtest
