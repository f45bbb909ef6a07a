# The VM image recipe, sourced by toolchain/vm.sh. Its text (and the files of
# guest/) make the image's cache key: change anything here and the next run
# builds the image again from nothing.
#
# build_image ARCH OUT: OUT/vmlinuz, OUT/initrd.img and OUT/root.img (ext4,
# sparse), a Debian 12 with systemd as PID 1 that runs the checks at boot.

IMAGE_SUITE=bookworm
IMAGE_PACKAGES=systemd,systemd-sysv,udev,dbus,python3,python3-venv,kmod,procps,util-linux,initramfs-tools
# what the initramfs needs to mount the root and the share; the console is
# virtio (hvc0) on aarch64, whose one PL011 UART is left for a board
IMAGE_MODULES="virtio_pci virtio_mmio virtio_blk virtio_console ext4 9p 9pnet_virtio"

build_image() {
    local arch=$1 out=$2 debarch
    case "$arch" in
        x86_64) debarch=amd64 ;;
        aarch64) debarch=arm64 ;;
    esac
    local tree=$out.tree
    rm -rf "$tree" "$out"
    mkdir -p "$out"
    if [ "$debarch" = arm64 ]; then
        # the arm64 maintainer scripts run under qemu-user through binfmt_misc
        [ -e /proc/sys/fs/binfmt_misc/register ] ||
            mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
        [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] ||
            sed -n 's/^\(:qemu-aarch64:.*\)$/\1/p' /usr/lib/binfmt.d/qemu-aarch64.conf \
                >/proc/sys/fs/binfmt_misc/register
    fi
    # a small initramfs of listed modules only: written before the kernel's
    # postinst builds it
    local hook
    hook="mkdir -p \"\$1/etc/initramfs-tools/conf.d\" &&
          echo MODULES=list >\"\$1/etc/initramfs-tools/conf.d/vm\" &&
          printf '%s\n' $IMAGE_MODULES >\"\$1/etc/initramfs-tools/modules\""
    mmdebstrap --quiet --mode=root --variant=minbase --arch="$debarch" \
        --include="$IMAGE_PACKAGES,linux-image-$debarch" \
        --essential-hook="$hook" \
        --customize-hook="cp -r '$VM_DIR/guest/.' \"\$1/\" && mkdir -p \"\$1/host\"" \
        --customize-hook='chroot "$1" systemctl enable homeagent-vmcheck.service' \
        --customize-hook='chroot "$1" systemctl mask serial-getty@.service getty@.service' \
        "$IMAGE_SUITE" "$tree"
    cp "$tree"/boot/vmlinuz-* "$out/vmlinuz"
    cp "$tree"/boot/initrd.img-* "$out/initrd.img"
    mkfs.ext4 -q -L root -d "$tree" "$out/root.img" 2G
    rm -rf "$tree"
}
