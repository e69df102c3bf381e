module pacer

go 1.24
