module example.com/ddp-mnist-go

go 1.26

require github.com/pulumi/pulumi/sdk/v3 v3.274.1
