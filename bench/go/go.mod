module pacerbench

go 1.26.0

require (
	golang.org/x/time v0.16.0
	pacer v0.0.0
)

replace pacer => ../../bindings/go
