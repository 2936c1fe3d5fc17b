"""MMEngine's Runner, unchanged, as its 15-minute tutorial uses it: a BaseModel wrapping torchvision's
ResNet-18 (no weights), a dataset of synthetic images, iteration-based training (`train_cfg` by_epoch
False), the CheckpointHook every `--save_every` iterations into work_dir, and the Runner's own resume
(`resume=True`: the newest checkpoint recorded in work_dir/last_checkpoint)."""
import argparse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work_dir", required=True)
    ap.add_argument("--batch_size", type=int, default=32)
    ap.add_argument("--max_iters", type=int, default=8)
    ap.add_argument("--save_every", type=int, default=2)
    ap.add_argument("--image_size", type=int, default=64)
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    import torchvision
    from mmengine.model import BaseModel
    from mmengine.runner import Runner

    class MMResNet18(BaseModel):
        def __init__(self):
            super().__init__()
            self.resnet = torchvision.models.resnet18(num_classes=10)

        def forward(self, imgs, labels, mode):
            x = self.resnet(imgs)
            if mode == "loss":
                return {"loss": F.cross_entropy(x, labels)}
            return x, labels

    class Synthetic(torch.utils.data.Dataset):
        def __len__(self):
            return 4096

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return torch.rand(3, a.image_size, a.image_size, generator=g), i % 10

    runner = Runner(
        model=MMResNet18(), work_dir=a.work_dir,
        train_dataloader=dict(dataset=Synthetic(), batch_size=a.batch_size, sampler=dict(type="DefaultSampler", shuffle=True),
                              collate_fn=dict(type="default_collate"), num_workers=0),
        optim_wrapper=dict(optimizer=dict(type=torch.optim.SGD, lr=0.01, momentum=0.9)),
        train_cfg=dict(by_epoch=False, max_iters=a.max_iters),
        default_hooks=dict(checkpoint=dict(type="CheckpointHook", interval=a.save_every, by_epoch=False),
                           logger=dict(type="LoggerHook", interval=1)),
        resume=True, randomness=dict(seed=0), launcher="none")
    runner.train()


if __name__ == "__main__":
    main()
