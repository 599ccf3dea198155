"""Admission: what the write path asks before an object is stored.  :mod:`.policy` evaluates
ValidatingAdmissionPolicies."""
