"""A plain single-GPU image-classification loop as public ImageNet-style examples write it: a timm or
torchvision model (built from its name, no weights), optionally wrapped in `nn.DataParallel` as those
examples do on one GPU, torchvision's FakeData as the dataset, SGD with momentum, a checkpoint dict
(`step`, `state_dict`, `optimizer`) saved every `--save-every` steps with torch.save and loaded by
`--resume PATH` when the file exists. The loop is ours; the models and the dataset are the libraries'."""
import argparse
import os


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="timm:resnet18")
    ap.add_argument("--data-parallel", action="store_true")
    ap.add_argument("-b", "--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--save-every", type=int, default=2)
    ap.add_argument("--resume", default="")
    a = ap.parse_args()
    import torch
    import torchvision
    from torch.utils.data import DataLoader
    lib, name = a.arch.split(":")
    torch.manual_seed(0)
    if lib == "timm":
        import timm
        model = timm.create_model(name, num_classes=10)
    else:
        model = getattr(torchvision.models, name)(num_classes=10)
    if a.data_parallel:
        model = torch.nn.DataParallel(model).cuda()
    else:
        model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    crit = torch.nn.CrossEntropyLoss().cuda()
    data = torchvision.datasets.FakeData(size=4096, image_size=(3, a.image_size, a.image_size), num_classes=10,
                                         transform=torchvision.transforms.ToTensor(), random_offset=0)
    step = 0
    if a.resume and os.path.isfile(a.resume):
        ck = torch.load(a.resume, map_location="cuda")
        model.load_state_dict(ck["state_dict"])
        opt.load_state_dict(ck["optimizer"])
        step = ck["step"]
        print("=> loaded checkpoint '%s' (step %d)" % (a.resume, step), flush=True)
    g = torch.Generator().manual_seed(0)
    loader = DataLoader(data, batch_size=a.batch_size, shuffle=True, generator=g, num_workers=0)
    model.train()
    it = iter(loader)
    for _ in range(step):  # the batches the checkpoint already trained on
        next(it)
    while step < a.steps:
        images, target = next(it)
        images, target = images.cuda(non_blocking=True), target.cuda(non_blocking=True)
        loss = crit(model(images), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        print("step %d bs=%d loss=%.4f" % (step, images.shape[0], loss.item()), flush=True)
        if a.resume and step % a.save_every == 0:
            os.makedirs(os.path.dirname(a.resume) or ".", exist_ok=True)
            torch.save({"step": step, "arch": a.arch, "state_dict": model.state_dict(),
                        "optimizer": opt.state_dict()}, a.resume)


if __name__ == "__main__":
    main()
