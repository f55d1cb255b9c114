// misplace: the cluster lane's runc wrapper that reproduces the runwasi
// shim's misplaced container cgroups (see main.go). Its own module, with
// nothing but the standard library, so scripts/cluster builds it in a
// second and the NRI lane can reuse it as it is.
module github.com/cgwarden/cgwarden/test/cluster/misplace

go 1.26.0
