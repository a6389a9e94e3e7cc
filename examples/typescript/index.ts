import * as pulumi from "@pulumi/pulumi";
import * as ddpmnist from "ddp-mnist";

const job = new ddpmnist.TrainingJob("job", {
    namespace: "ddp-mnist-dev",
    nfsServer: "nfs.example.internal",
    seedSource: "none",
    operatorInstall: false,
    operatorInitContainerRestricted: true,
    jobNodes: 2,
    serveKind: "none",
});

export const jobName: pulumi.Output<string | undefined> = job.jobName;
