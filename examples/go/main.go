package main

import (
	"ddp-mnist.local/sdk/go/ddpmnist"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		job, err := ddpmnist.NewTrainingJob(ctx, "job", &ddpmnist.TrainingJobArgs{
			Namespace:                       pulumi.StringRef("ddp-mnist-dev"),
			NfsServer:                       pulumi.StringRef("nfs.example.internal"),
			SeedSource:                      pulumi.StringRef("none"),
			OperatorInstall:                 pulumi.BoolRef(false),
			OperatorInitContainerRestricted: pulumi.BoolRef(true),
			JobNodes:                        pulumi.IntRef(2),
			ServeKind:                       pulumi.StringRef("none"),
		})
		if err != nil {
			return err
		}
		ctx.Export("jobName", job.JobName)
		return nil
	})
}
